"""The fp32 prologue of the fused ops, written straight from docs/contracts.md (no rounding of q/k/v).

``x = proj * inv_rms``; per-head QK-norm ``x * rsqrt(mean(x²) + eps) * w`` on q and k;
NeoX RoPE ``x*cos + rotate_half(x)*sin`` with the given tables at ``positions``.
"""
from __future__ import annotations

import torch

F32 = torch.float32


def _rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos[:, None] + torch.cat([-x2, x1], dim=-1) * sin[:, None]


def prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions, eps):
    D = q_norm_weight.shape[0]
    T = q_proj.shape[0]
    s = inv_rms.to(F32)
    q, k, v = ((p.to(F32) * s).view(T, -1, D) for p in (q_proj, k_proj, v_proj))
    cos, sin = rope_cos[positions.long()].to(F32), rope_sin[positions.long()].to(F32)

    def qk(x, w):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.to(F32)
        return _rope(x, cos, sin)

    return qk(q, q_norm_weight), qk(k, k_norm_weight), v
