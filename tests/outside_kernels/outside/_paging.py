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
