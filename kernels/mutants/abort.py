"""Mutant: aborts the process (SIGABRT).

Real bug: a failed assertion inside a native kernel library or runtime
(``CHECK`` / ``assert`` in C++), which calls ``abort()`` and takes the whole
process down with SIGABRT.
"""
from __future__ import annotations

import os
from typing import Any

from harness.kernels.reference import for_every_op


def _abort(op: str, args: dict[str, Any]) -> None:
    os.abort()


(rope_kv_write, paged_decode_attention, fused_rope_decode_attention, prefill_attention,
 decode_layers) = for_every_op(_abort)
