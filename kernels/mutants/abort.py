"""Mutant: aborts the process (SIGABRT).

Real bug: a failed assertion inside a native kernel library or runtime
(``CHECK`` / ``assert`` in C++), which calls ``abort()`` and takes the whole
process down with SIGABRT.
"""
from __future__ import annotations

import os
from typing import Any

from kernels.reference import with_op_signature


def _abort(op: str, args: dict[str, Any]) -> None:
    os.abort()


rope_kv_write = with_op_signature("rope_kv_write", _abort)
paged_decode_attention = with_op_signature("paged_decode_attention", _abort)
fused_rope_decode_attention = with_op_signature("fused_rope_decode_attention", _abort)
prefill_attention = with_op_signature("prefill_attention", _abort)
decode_layers = with_op_signature("decode_layers", _abort)
