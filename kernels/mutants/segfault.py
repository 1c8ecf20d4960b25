"""Mutant: kills its process with a segmentation fault.

Real bug class: a kernel (or its host-side launcher) dereferences a bad
pointer and takes the whole process down; the harness must see a dead worker
(CRASH with SIGSEGV), restart it, and go on.  Reading address 0 through ctypes
does exactly that.
"""
from __future__ import annotations

import ctypes
from typing import Any

from kernels.reference import with_op_signature


def _dereference_null(op: str, args: dict[str, Any]) -> None:
    ctypes.string_at(0)


rope_kv_write = with_op_signature("rope_kv_write", _dereference_null)
paged_decode_attention = with_op_signature("paged_decode_attention", _dereference_null)
fused_rope_decode_attention = with_op_signature("fused_rope_decode_attention", _dereference_null)
prefill_attention = with_op_signature("prefill_attention", _dereference_null)
decode_layers = with_op_signature("decode_layers", _dereference_null)
