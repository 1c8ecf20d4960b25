"""Mutant: GPT-J (interleaved) RoPE where the model uses NeoX (rotate-half) RoPE.

Real bug class: a kernel ported from a GPT-J-style model rotates adjacent pairs
``(x0, x1), (x2, x3), ...`` instead of the two halves ``(x_i, x_{i+D/2})``.  Position 0
is unaffected (cos = 1, sin = 0); every later position is wrong in ``query``, the
cached k rows and the attention downstream.  Everything else is the reference.
"""
from __future__ import annotations

import torch
from torch import Tensor

from harness.kernels.reference import ReferenceKernel


class GptjRope(ReferenceKernel):
    def rope(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        # cos/sin rows hold each frequency twice (halves); interleave them to match the pairs.
        half = x.shape[-1] // 2
        cos_i = torch.repeat_interleave(cos[..., :half], 2, dim=-1)
        sin_i = torch.repeat_interleave(sin[..., :half], 2, dim=-1)
        pairs = x.unflatten(-1, (half, 2))
        rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
        return x * cos_i + rotated * sin_i


_KERNEL = GptjRope()
rope_kv_write = _KERNEL.rope_kv_write
fused_rope_decode_attention = _KERNEL.fused_rope_decode_attention
prefill_attention = _KERNEL.prefill_attention
decode_layers = _KERNEL.decode_layers
