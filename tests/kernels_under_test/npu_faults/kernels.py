"""Kernels for the NPU stand-in (tests/npu_standin), written as a kernel author on an Ascend host
would: they do the work with torch on the device they are given, and the faulting ones ask the
runtime for a fault as a broken AscendC kernel would cause one."""
import os

import torch


def _write(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
           positions, slot_mapping, eps, k_cache, v_cache, query):
    from harness.kernels.reference import rope_kv_write
    rope_kv_write(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                  positions, slot_mapping, eps, k_cache, v_cache, query)


def wrapper_only_507018(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                        positions, slot_mapping, eps, k_cache, v_cache, query):
    """Faults on the device: the exception is torch-npu's wrapper, the 507018 block is in the plog."""
    _write(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
           positions, slot_mapping, eps, k_cache, v_cache, query)
    torch.npu.standin_fault(507018, kernel_name="rope_kv_write_mix_aiv", op="RopeKvWrite")


def faults_and_loses_device(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                            positions, slot_mapping, eps, k_cache, v_cache, query):
    """Faults once on the NPU named by FAULT_ON (a physical id), and that NPU stays broken."""
    _write(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
           positions, slot_mapping, eps, k_cache, v_cache, query)
    if os.environ.get("ASCEND_RT_VISIBLE_DEVICES") == os.environ.get("FAULT_ON"):
        torch.npu.standin_fault(507018, lose_device=True)


def allocates_on_device_zero(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                             positions, slot_mapping, eps, k_cache, v_cache, query):
    """A careless kernel: scratch on "npu:0" and "the current device", whatever it was given."""
    torch.empty(16, device="npu:0")
    torch.empty(16, device=torch.device("npu", torch.npu.current_device()))
    _write(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
           positions, slot_mapping, eps, k_cache, v_cache, query)
