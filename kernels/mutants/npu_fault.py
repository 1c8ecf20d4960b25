"""Mutant: an EMULATION of torch-npu's report of an AICore fault followed by 507018.

No NPU runs here: this prints the runtime's log lines and raises the exception
text torch-npu raises when a kernel faults on an Ascend device (the AICore
exception printed first, the generic AICPU 507018 wrapper after it), so the
classifier's root-cause ordering can be proven on any machine.  Everything in
the text is written by us in the shape real reports have.
"""
from __future__ import annotations

import os
import sys
from typing import Any

from harness.kernels.reference import for_every_op


def _emulated_npu_fault(op: str, args: dict[str, Any]) -> None:
    pid = os.getpid()
    print(f"[ERROR] RUNTIME({pid},python):2026-11-30-12:00:00.000.001 [device_error_proc.cc:1004] "
          "The aicore execution is abnormal, device_id=0, stream_id=3, task_id=12, "
          "kernel_name=fused_rope_decode_attention_bf16", file=sys.stderr, flush=True)
    print(f"[ERROR] RUNTIME({pid},python):2026-11-30-12:00:00.000.002 [task_info.cc:1412] "
          "Kernel task happen error, retCode=0x26, [aicore exception].", file=sys.stderr, flush=True)
    raise RuntimeError(
        "NPU function error: aclrtSynchronizeStreamWithTimeout(stream, -1), error code is 507018\n"
        "[ERROR] 2026-11-30-12:00:00 (PID:{pid}, Device:0, RankID:-1) ERR00100 PTA call acl api failed\n"
        "EZ9999: Inner Error!\nEZ9999: The error from device(chipId:0, dieId:0), serial number is 7, "
        "there is an aicore error exception, core id is 12, error code = 0x800000"
    )


(rope_kv_write, paged_decode_attention, fused_rope_decode_attention, prefill_attention,
 decode_layers) = for_every_op(_emulated_npu_fault)
