"""Mutants: attention reads the wrong number of keys, as a loop bound or length mask off by a little.

Real bug classes of paged attention kernels, each the reference with one bound changed in
the attention stage (the cache writes stay right):

- ``OneKeyTooFew``: the last cached key is never read (``pos < n - 1``, a loop that
  starts late or stops early);
- ``OneKeyTooMany``: one position past the cached keys is read (``pos <= n``): the row
  the harness fills with a hot canary, or the current token's row before its write;
- ``UnmaskedTail``: the last cached page is read whole (the length mask applied per page,
  not per position): the positions past the sequence's length in its last page;
- ``BlockTooMany``: one block past the last is read whole (a block loop to
  ``ceil(n / P) + 1``): the page a ``-1`` block-table entry reaches when used as an index
  (``cache[-1]``), or a page of another sequence.

``n`` is the number of cached positions each sequence attends to: ``seq_len`` in
``paged_decode_attention``, ``seq_len - 1`` in the fused decode (the current token comes
from registers), ``context_lens[b]`` in prefill.  A sequence whose adjusted count leaves the
block table (more than ``MB`` blocks) reads nothing more: the reference never gathers past
the table.
"""
from __future__ import annotations

from torch import Tensor

from harness.kernels.reference import ReferenceKernel, decode_attention, prefill_core


class _Bounds(ReferenceKernel):
    def cached(self, n: Tensor, page_size: int) -> Tensor:
        """The cached positions attended to per sequence, given the right count ``n`` (int64)."""
        raise NotImplementedError

    def paged_decode_attention(self, query, block_table, seq_lens, scale, k_cache, v_cache, out):
        n = self.cached(seq_lens.long(), k_cache.shape[1])
        out.copy_(decode_attention(query, k_cache, v_cache, block_table, n, scale, split_pages=self.split_pages))
        return out

    def decode_step(self, q, k, v, k_cache, v_cache, slot_mapping, block_table, seq_lens, scale):
        # decode_attention reads seq_lens - 1 cached positions when given the fresh k/v
        n = self.cached(seq_lens.long() - 1, k_cache.shape[1]) + 1
        out = decode_attention(q, k_cache, v_cache, block_table, n, scale, fresh_k=k, fresh_v=v,
                               split_pages=self.split_pages)
        self.write(k_cache, slot_mapping, k)
        self.write(v_cache, slot_mapping, v)
        return out

    def prefill_step(self, q, k, v, k_cache, v_cache, slot_mapping, block_table, cu_seqlens, context_lens, scale):
        n = self.cached(context_lens.long(), k_cache.shape[1])
        out = prefill_core(q, k_cache, v_cache, block_table, cu_seqlens, n, scale, fresh_k=k, fresh_v=v,
                           split_pages=self.split_pages, q_tile=self.q_tile)
        self.write(k_cache, slot_mapping, k)
        self.write(v_cache, slot_mapping, v)
        return out


class OneKeyTooFew(_Bounds):
    def cached(self, n, page_size):
        return (n - 1).clamp_min(0)


class OneKeyTooMany(_Bounds):
    def cached(self, n, page_size):
        return n + 1


class UnmaskedTail(_Bounds):
    def cached(self, n, page_size):
        return (n + page_size - 1) // page_size * page_size


class BlockTooMany(_Bounds):
    def cached(self, n, page_size):
        return torch_blocks(n, page_size) * page_size


def torch_blocks(n: Tensor, page_size: int) -> Tensor:
    """``ceil(n / P) + 1`` blocks for a sequence with cached positions, none for one without."""
    blocks = (n + page_size - 1) // page_size
    return blocks + (blocks > 0).long()


one_key_too_few = OneKeyTooFew()
one_key_too_many = OneKeyTooMany()
unmasked_tail = UnmaskedTail()
block_too_many = BlockTooMany()
