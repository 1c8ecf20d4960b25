"""Paging helpers shared by the outside kernels: gather a sequence's positions, write rows at slots.

Written from docs/contracts.md: position p of sequence b is row p % P of page
block_table[b, p // P]; a row is written at slot s (page s // P, offset s % P) when s >= 0.
"""
from __future__ import annotations

import torch


def gather(cache: torch.Tensor, block_row: torch.Tensor, count: int, dtype: torch.dtype) -> torch.Tensor:
    """Positions ``0..count-1`` of one sequence, ``[count, Hkv, D]`` in dtype."""
    page_size = cache.shape[1]
    pos = torch.arange(count, device=cache.device)
    pages = block_row.to(cache.device)[pos // page_size].long()
    return cache[pages, pos % page_size].to(dtype)


def write(cache: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> None:
    """``cache[slot] = rows`` (rounded once to the cache dtype) for every row whose slot is >= 0, in place."""
    slots = slots.to(cache.device).long()
    keep = slots >= 0
    if not bool(keep.any()):
        return
    s = slots[keep]
    page_size = cache.shape[1]
    cache[s // page_size, s % page_size] = rows[keep.to(rows.device)].to(cache.dtype)


def split_heads(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    return x.reshape(x.shape[0], -1, head_dim)


def decode_with_fresh(attend, q, k, v, block_table, seq_lens, k_cache, v_cache, scale) -> torch.Tensor:
    """Each row's query over its cached context (positions ``< seq_len - 1``) and its own fresh k/v.

    ``attend(q [1, Hq, D], keys [n, Hkv, D], vals, scale) -> [1, Hq, D]`` is the kernel's own attention.
    """
    result = torch.empty_like(q)
    for b in range(q.shape[0]):
        n = int(seq_lens[b]) - 1
        keys = torch.cat([gather(k_cache, block_table[b], n, q.dtype), k[b:b + 1]])
        vals = torch.cat([gather(v_cache, block_table[b], n, q.dtype), v[b:b + 1]])
        result[b] = attend(q[b:b + 1], keys, vals, scale)[0]
    return result


def prefill_chunks(attend_causal, q, k, v, cu_seqlens, context_lens, block_table, k_cache, v_cache,
                   scale) -> torch.Tensor:
    """Each sequence's chunk over its cached context, and causally over the chunk's fresh k/v.

    ``attend_causal(q [m, Hq, D], keys [c + m, Hkv, D], vals, c, scale) -> [m, Hq, D]``: query ``i``
    of the chunk sees keys ``0 .. c + i``.
    """
    cu = cu_seqlens.tolist()
    result = torch.empty_like(q)
    for b, c in enumerate(context_lens.tolist()):
        lo, hi = cu[b], cu[b + 1]
        if hi == lo:
            continue
        keys = torch.cat([gather(k_cache, block_table[b], c, q.dtype), k[lo:hi]])
        vals = torch.cat([gather(v_cache, block_table[b], c, q.dtype), v[lo:hi]])
        result[lo:hi] = attend_causal(q[lo:hi], keys, vals, c, scale)
    return result
