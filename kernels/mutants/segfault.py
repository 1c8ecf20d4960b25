"""Mutant: kills its process with a segmentation fault.

Real bug class: a kernel (or its host-side launcher) dereferences a bad
pointer and takes the whole process down; the harness must see a dead worker
(CRASH with SIGSEGV), restart it, and go on.  Reading address 0 through ctypes
does exactly that.
"""
from __future__ import annotations

import ctypes
from typing import Any

from harness.kernels.reference import for_every_op


def _dereference_null(op: str, args: dict[str, Any]) -> None:
    ctypes.string_at(0)


(rope_kv_write, paged_decode_attention, fused_rope_decode_attention, prefill_attention,
 decode_layers) = for_every_op(_dereference_null)
