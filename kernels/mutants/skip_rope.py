"""Mutant: QK-norm without the rotary embedding on q and k.

Real bug class: a fused prologue whose RoPE stage was skipped (a mis-set
flag, a tiling path that forgot the rotation).  Position 0 is unaffected
(cos = 1, sin = 0), every later position is wrong, in ``query``, in the
cached k rows and in every attention result downstream.  Everything else is
the reference.
"""
from __future__ import annotations

from torch import Tensor

from harness.kernels.reference import ReferenceKernel


class SkipRope(ReferenceKernel):
    def rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        return x


_KERNEL = SkipRope()
rope_kv_write = _KERNEL.rope_kv_write
fused_rope_decode_attention = _KERNEL.fused_rope_decode_attention
prefill_attention = _KERNEL.prefill_attention
decode_layers = _KERNEL.decode_layers
