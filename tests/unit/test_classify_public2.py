"""Issue 38: classes by what to do next, on a fresh set of real failure logs (tests/fixtures/logs/public2,
labelled before the classifier was run on them), and each new rule on a real excerpt (its source in
the comment) against lines that only look alike."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness.bisect.driver import _NOT_RUN
from harness.classify import builtin_rules, builtin_tables, classify_exit, classify_text, \
    match_rules, read_log
from harness.outcomes import Outcome, label
from helpers import classify_collected

PUBLIC2 = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "public2"
COLLECTION: dict = yaml.safe_load((PUBLIC2 / "collection.yaml").read_text())
DOC = Path(__file__).resolve().parents[2] / "docs" / "classify.md"


def _classify(name: str, spec: dict):
    return classify_collected(PUBLIC2, name, spec)


def test_the_set_is_large_labelled_sourced_and_has_a_held_out_part():
    assert {p.name for p in PUBLIC2.glob("*.log")} == set(COLLECTION)
    assert len(COLLECTION) >= 40
    assert sum(bool(s.get("held_out")) for s in COLLECTION.values()) >= len(COLLECTION) // 4
    for name, spec in COLLECTION.items():
        assert spec["source"].startswith("https://github.com/"), name
        assert spec["label"] == label(spec["outcome"], spec["code"]), name
        assert len(read_log(PUBLIC2 / name).splitlines()) <= 30, name


@pytest.mark.parametrize("name", sorted(COLLECTION))
def test_fresh_public_log_gets_the_class_written_before_the_run(name):
    spec = COLLECTION[name]
    c = _classify(name, spec)
    assert (c.outcome.value, label(c.outcome, c.code), c.code) == (spec["outcome"], spec["label"], spec["code"]), \
        c.summary
    assert "\n" not in c.summary and len(c.summary) < 600


NEW_RULES = {"hccl_comm_init_failure", "nccl_remote_error", "nccl_network_failure", "nccl_ib_completion_error",
             "nccl_unhandled_cuda_error", "cuda_no_kernel_image", "cuda_invalid_configuration",
             "cuda_launch_out_of_resources", "cublas_status", "serving_watchdog_timeout",
             "triton_ascend_compile_error", "cann_op_compile_error", "compiler_process_failed",
             "inductor_backend_failed", "llvm_fatal_error", "host_alloc_failure"}


def test_every_new_rule_is_exercised_by_a_fresh_public_log():
    hit = set()
    for name in COLLECTION:
        hit |= {h.rule.name for h in match_rules(read_log(PUBLIC2 / name))}
    assert NEW_RULES <= {r.name for r in builtin_rules()}
    assert NEW_RULES <= hit, NEW_RULES - hit


# -- the families, each on a real line (source) -------------------------------------------------------

@pytest.mark.parametrize("text, code", [
    # vllm-project/vllm-ascend#2712
    ("RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:148 HCCL function error: "
     "hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error code is 1", 1),
    # gpustack/gpustack#2021
    ("[ERROR] HCCL(36035,mindie_llm_backend_connector):2025-05-13-02:25:58.068.817 [op_base.cc:974][36818][Init]"
     "[CommRootInfoConfig]errNo[0x0000000005000002]HcclCommInitRootInfo failed.", None),
    # hiyouga/LlamaFactory#3839
    ("EJ0001: 2024-05-21-11:57:54.167.645 Failed to initialize the HCCP process. Reason: Maybe the last training "
     "process is running.", "EJ0001"),
    # NVIDIA/nccl#2076
    ("ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.", None),
    # NVIDIA/nccl#1232 (title)
    ("NCCL WARN socketProgress: Connection closed by remote peer node2<42830>", None),
    # NVIDIA/nccl#1664 (title)
    ("NET/IBP:Got completion from peer 7.6.13.83<36315> with status=12 opcode=32698 len=32696 vendor err 129 (Send)",
     None),
    # NVIDIA/nccl#1410
    ("[rank7]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
     "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5", None),
    # vllm-project/vllm-ascend#672
    ("rtGetDeviceIndexByPhyId execute failed, reason=[device id error][FUNC:FuncErrorReason]", None),
])
def test_environment_failures_are_env_error_and_sticky(text, code):
    c = classify_text(text)
    assert (c.outcome, c.code, c.sticky) == (Outcome.ENV_ERROR, code, True), c.summary
    assert c.hint and label(c.outcome, c.code) == "ENV_ERROR"


def test_a_device_fault_printed_with_nccls_unhandled_cuda_error_is_the_cause():
    c = classify_text("RuntimeError: CUDA error: an illegal memory access was encountered\n"
                      "NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)")
    assert (c.outcome, c.code) == (Outcome.DEVICE_FAULT, 700)


@pytest.mark.parametrize("text, code", [
    # sgl-project/sglang#16360
    ("bishengir-compile: for the --target option: Cannot find option named 'Ascend910B4-1'!", None),
    ("triton.compiler.errors.MLIRCompilationError: ", None),
    # shirwy/vllm-ascend-910a#4
    ("[rank0]: E90003: [PID: 9038] 2025-09-28-03:43:47.761.546 Compile operator failed, cause: Template constraint, "
     "detailed information: bfloat16 of tbe.dsl.transdata is not supported.", "E90003"),
    # Tlntin/qwen-ascend-llm#11
    ("        Failed to compile Op [/model/layers.19/self_attn/Slice_ascend_mbatch_batch_5]. (optype: [StridedSliceD])",
     None),
    # Comfy-Org/ComfyUI#6949
    ("backend='inductor' raised:CalledProcessError: Command '['C:\\\\Program Files (x86)\\\\cl.EXE', 'main.c']", None),
    # THUDM/slime#1314
    ("subprocess.CalledProcessError: Command '['ninja', '-v', '-C', '/cache/cached_ops']' returned non-zero exit "
     "status 1.", None),
    # luka-group/mDPO#14
    ("subprocess.CalledProcessError: Command '['/usr/bin/gcc', '/tmp/tmpy1gk3r1e/main.c', '-O3']' returned non-zero "
     "exit status 1.", None),
    # triton-lang/triton#11747
    ("LLVM ERROR: Cannot select: intrinsic %llvm.nvvm.tcgen05.wait.st", None),
    # shouxieai/tensorRT_Pro#162
    ("[error][simple_yolo.cu:556]:launch failed: no kernel image is available for execution on the device", 209),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", 209),
])
def test_compile_failures_however_they_surface_are_build_errors(text, code):
    c = classify_text(text)
    assert (c.outcome, c.code, c.sticky) == (Outcome.BUILD_ERROR, code, False), c.summary


def test_a_compiler_abort_is_a_build_error_not_the_signal():
    c = classify_exit(-6, "LLVM ERROR: Cannot select: intrinsic %llvm.nvvm.tcgen05.wait.st\nFatal Python error: Aborted")
    assert (c.outcome, c.code, c.rule) == (Outcome.BUILD_ERROR, None, "llvm_fatal_error")
    assert "FAIL_SIGABRT" in c.secondary


def test_torch_compile_wrapping_an_oom_is_the_oom():
    c = classify_text("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n"
                      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0")
    assert c.outcome is Outcome.OOM


@pytest.mark.parametrize("text, code", [
    # buaacyw/GaussianEditor#46
    ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmEx( handle, opa, opb, m, n, k, "
     "&falpha, a, CUDA_R_16F, lda, b, CUDA_R_16F, ldb, &fbeta, c, CUDA_R_16F, ldc, CUDA_R_32F, "
     "CUBLAS_GEMM_DEFAULT_TENSOR_OP)`", "CUBLAS_STATUS_NOT_SUPPORTED"),
    # Dao-AILab/causal-conv1d#48
    ("RuntimeError: CUDA error: invalid configuration argument", 9),
    # sxyu/svox2#6
    ("RuntimeError: CUDA error: too many resources requested for launch", 701),
    # JuliaGPU/CUDAnative.jl#293
    ("ERROR: CUDA error: too many resources requested for launch (code #701, ERROR_LAUNCH_OUT_OF_RESOURCES)", 701),
])
def test_host_side_api_rejections_are_crashes_that_keep_the_worker(text, code):
    c = classify_text(text)
    assert (c.outcome, c.code, c.sticky) == (Outcome.CRASH, code, False), c.summary


def test_cublas_statuses_that_are_not_rejections_keep_their_own_class():
    assert classify_text("CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`").outcome is Outcome.OOM
    failed = classify_text("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm(...)`")
    assert (failed.outcome, failed.sticky) == (Outcome.DEVICE_FAULT, True)
    inner = classify_text("CUDA error: an illegal memory access was encountered\n"
                          "CUDA error: CUBLAS_STATUS_INTERNAL_ERROR when calling `cublasGemmEx(...)`")
    assert (inner.outcome, inner.code) == (Outcome.DEVICE_FAULT, 700)


@pytest.mark.parametrize("text", [
    # MaximeVandegar/Papers-in-100-Lines-of-Code#10 (Windows)
    "RuntimeError: [enforce fail at C:\\b\\work\\c10\\core\\impl\\alloc_cpu.cpp:81] data. DefaultCPUAllocator: "
    "not enough memory: you tried to allocate 1981808640 bytes.",
    # mxfold/mxfold2#20 (Linux)
    "RuntimeError: [enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you "
    "tried to allocate 132426121216 bytes. Error code 12 (Cannot allocate memory)",
    # weiliu89/caffe#689
    "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc",
    "OSError: [Errno 12] Cannot allocate memory",
    "LLVM ERROR: out of memory",
    "NPU out of memory. Tried to allocate 22.00 MiB (NPU 0; 60.97 GiB total capacity)",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0",
])
def test_oom_in_every_allocators_wording(text):
    c = classify_text(text)
    assert (c.outcome, c.sticky) == (Outcome.OOM, False), c.summary


def test_windows_cpu_allocator_keeps_the_requested_bytes():
    c = classify_text("DefaultCPUAllocator: not enough memory: you tried to allocate 1981808640 bytes.")
    assert c.fields["requested_bytes"] == 1981808640


def test_bad_alloc_then_abort_is_an_oom():
    c = classify_exit(-6, "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc")
    assert (c.outcome, c.code, c.rule) == (Outcome.OOM, None, "host_alloc_failure") and "FAIL_SIGABRT" in c.secondary


def test_a_serving_watchdog_before_the_kill_is_a_hang():
    # UCSB-AI/Soft-Thinking#10
    c = classify_exit(-9, "[2025-06-22 16:13:55 TP0] Watchdog timeout (self.watchdog_timeout=300)\n"
                          "[2025-06-22 16:14:00] Received sigquit from a child process.   It usually means the child failed.")
    assert (c.outcome, c.code, c.fields["watchdog_s"]) == (Outcome.HANG, None, 300) and "FAIL_SIGKILL" in c.secondary


@pytest.mark.parametrize("text", [
    "NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",              # NCCL chatter
    "NCCL INFO Connected all rings",
    "hcclCommInitRootInfoConfig ok, comm=0x7f00",                                   # a set-up that worked
    "CUBLAS_STATUS_SUCCESS",
    "see the CUBLAS_STATUS codes in the cuBLAS docs",                                # no status name
    "Using a watchdog timeout of 300 s",                                             # prose, not sglang's line
    "LLVM ERROR handling is described in docs/llvm.md",                              # no 'LLVM ERROR: '
    "compile of op [add] took 3 s",
    "we tried to compile Op [add] twice",                                            # not 'Failed to compile Op'
    "ninja: no work to do.",
    "subprocess.CalledProcessError: Command '['git', 'describe']' returned non-zero exit status 128.",  # not a compiler
    "Received sigquit from a child process.",
    "bad_alloc_count=0",
])
def test_no_false_alarm_from_lines_that_only_look_alike(text):
    assert classify_text(text) is None, [h.rule.name for h in match_rules(text)]


# -- the class table and what ENV_ERROR means downstream -------------------------------------------------

def test_the_class_table_names_every_failing_class_with_fault_action_and_stickiness():
    section = DOC.read_text(encoding="utf-8").split("## Classes by what to do next", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([A-Z_]+)` \| ([^|]+) \| ([^|]+) \| (yes|no|[^|]*) \|", section, re.M)
    documented = {cls for cls, *_ in rows}
    failing = {o.value for o in Outcome if o.failed}
    assert failing <= documented, failing - documented


def test_env_error_is_a_failure_the_kernel_is_not_blamed_for():
    assert Outcome.ENV_ERROR.failed and label(Outcome.ENV_ERROR, 507033) == "ENV_ERROR"
    assert Outcome.ENV_ERROR in _NOT_RUN                      # bisect: the commit is untestable, not clean


# -- 107xxx: the docs and the code table say the same ---------------------------------------------------

def test_the_107xxx_codes_that_are_not_parameter_errors_are_the_ones_the_docs_name():
    acl = builtin_tables()["acl"]
    not_param = {code for code in acl if 107000 <= code < 108000 and acl[code].outcome is not None}
    prose = DOC.read_text(encoding="utf-8")
    named = {int(m) for m in re.findall(r"\b(107\d{3})\b", prose.split("### 107xxx", 1)[1].split("\n#", 1)[0])}
    assert not_param and not_param <= named, not_param - named
    for code in not_param:
        assert f"`{code}`" in prose, code
