"""What the adapted kernels share, written from docs/contracts.md: the fp32 prologue and paging.

The prologue writes the intermediates it has (``q_norm``, ``k_norm``, ``q_rope``, ``k_rope``,
``v``) into ``$HARNESS_DUMP_DIR`` when the harness sets it, and the kernels their attention
output (``attn``), as a compiled library without a Python callback would (``dump_file``).

Prologue: ``x = proj * inv_rms``; per-head QK-norm ``x * rsqrt(mean(x²) + eps) * w`` on q and k;
NeoX RoPE ``x*cos + rotate_half(x)*sin`` at ``positions``.  The fresh q/k/v stay fp32: only
the stores round.  Paging: position p of a sequence is row p % P of page
``block_table[b, p // P]``; a row goes to slot s (page s // P, offset s % P) when s >= 0.
"""
from __future__ import annotations

import os

import torch

F32 = torch.float32


def dump_file(name: str, tensor: torch.Tensor) -> None:
    """An intermediate written as a compiled library would: ``<name>.pt`` into ``$HARNESS_DUMP_DIR``
    when the harness set it (docs/intermediates.md), else nothing."""
    folder = os.environ.get("HARNESS_DUMP_DIR")
    if folder:
        torch.save(tensor.detach().to("cpu").contiguous(), os.path.join(folder, f"{name}.pt"))


def _rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos[:, None] + torch.cat([-x2, x1], dim=-1) * sin[:, None]


def prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions, eps):
    """q ``[T, Hq, D]``, k and v ``[T, Hkv, D]``, fp32."""
    D, T = q_norm_weight.shape[0], q_proj.shape[0]
    s = inv_rms.to(F32)
    q, k, v = ((p.to(F32) * s).view(T, -1, D) for p in (q_proj, k_proj, v_proj))
    cos, sin = rope_cos[positions.long()].to(F32), rope_sin[positions.long()].to(F32)

    def qk(x, w, name):
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.to(F32)
        dump_file(f"{name}_norm", normed)
        rotated = _rope(normed, cos, sin)
        dump_file(f"{name}_rope", rotated)
        return rotated

    q, k = qk(q, q_norm_weight, "q"), qk(k, k_norm_weight, "k")
    dump_file("v", v)
    return q, k, v


def gather(cache: torch.Tensor, block_row: torch.Tensor, count: int) -> torch.Tensor:
    """Positions ``0..count-1`` of one sequence from an NHD cache, ``[count, Hkv, D]`` fp32."""
    page_size = cache.shape[1]
    pos = torch.arange(count, device=cache.device)
    return cache[block_row.to(cache.device)[pos // page_size].long(), pos % page_size].to(F32)


def write(cache: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> None:
    """``cache[slot] = rows`` for every row whose slot is >= 0, in place (rounded once)."""
    slots = slots.to(cache.device).long()
    keep = slots >= 0
    if bool(keep.any()):
        s = slots[keep]
        cache[s // cache.shape[1], s % cache.shape[1]] = rows[keep.to(rows.device)].to(cache.dtype)
