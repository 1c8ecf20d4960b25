"""A correct tiled decode kernel that reads what it must not use: every block of the table,
a whole page at a time, with ``-1`` entries clamped to page 0, as a GPU kernel with a fixed
grid does.  Positions at or past the sequence's cached length get a score of -inf before the
running max and the exponent, so their probability is exactly 0 and ``0 · v`` adds nothing,
whatever the page holds.  Online softmax over the pages in fp32; the fused op's current token
comes from its fresh k/v (registers), then its row is written.

Written from docs/contracts.md, for paged_decode_attention and fused_rope_decode_attention.
"""
from __future__ import annotations

import torch

from outside._paging import write
from outside._prologue32 import prologue

F32 = torch.float32


def _tiled(q, k_cache, v_cache, block_table, cached, scale, fresh=None):
    """``q [B, Hq, D]`` over the first ``cached[b]`` positions of each sequence (+ fresh k/v)."""
    B, Hq, D = q.shape
    _, P, Hkv, _ = k_cache.shape
    G = Hq // Hkv
    qg = q.to(F32).view(B, Hkv, G, D)
    m = torch.full((B, Hkv, G), float("-inf"), dtype=F32, device=q.device)
    l = torch.zeros((B, Hkv, G), dtype=F32, device=q.device)
    acc = torch.zeros((B, Hkv, G, D), dtype=F32, device=q.device)

    def step(keys, vals, valid):
        nonlocal m, l, acc
        s = torch.einsum("bhgd,bphd->bhgp", qg, keys.to(F32)) * scale
        s = s.masked_fill(~valid[:, None, None, :], float("-inf"))
        m_new = torch.maximum(m, s.amax(-1))
        safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        p = torch.exp(s - safe[..., None])
        alpha = torch.exp(m - safe)
        l = l * alpha + p.sum(-1)
        acc = acc * alpha[..., None] + torch.einsum("bhgp,bphd->bhgd", p, vals.to(F32))
        m = m_new

    offsets = torch.arange(P, device=q.device)
    for j in range(block_table.shape[1]):
        page = block_table[:, j].long().clamp_min(0)          # every block, -1 read as page 0
        valid = (j * P + offsets)[None, :] < cached[:, None]
        step(k_cache[page], v_cache[page], valid)
    if fresh is not None:
        k, v = fresh
        step(k[:, None], v[:, None], torch.ones(B, 1, dtype=torch.bool, device=q.device))
    return (acc / l[..., None]).view(B, Hq, D)


def paged_decode_attention(query, block_table, seq_lens, scale, k_cache, v_cache, out):
    out.copy_(_tiled(query, k_cache, v_cache, block_table, seq_lens.long(), scale))


def fused_rope_decode_attention(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                                positions, slot_mapping, block_table, seq_lens, scale, eps, k_cache, v_cache, out,
                                query):
    q, k, v = prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
                       eps)
    q, k, v = q.to(query.dtype), k.to(k_cache.dtype), v.to(v_cache.dtype)   # stored as the cache holds them
    query.copy_(q)
    out.copy_(_tiled(q, k_cache, v_cache, block_table, seq_lens.long() - 1, scale, fresh=(k, v)))
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)
