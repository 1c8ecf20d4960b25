"""Mutant: attention reads one sequence's last cached page from the page after it.

Real bug class: a page index computed off by one (``block_table[b, j] + 1``, a wrong
base for the last partial page) in the attention stage only: the cache writes are
right, one sequence's attention reads its last context page from the wrong page.  The
sequence with the most cached context (of those whose output is compared) is the one hit; a case whose sequences have no
cached context, or whose cache is one page, cannot show it.  Everything else is the
reference.
"""
from __future__ import annotations

from torch import Tensor

from harness.kernels.reference import ReferenceKernel, decode_attention, prefill_core


def shifted(block_table: Tensor, cached: Tensor, page_size: int, num_pages: int) -> Tensor:
    """``block_table`` with the last page holding cached context of the longest sequence shifted by one."""
    b = int(cached.argmax())
    n = int(cached[b])
    table = block_table.clone()
    if n > 0:
        j = (n - 1) // page_size
        table[b, j] = (table[b, j] + 1) % num_pages
    return table


class OffByOnePage(ReferenceKernel):
    def decode_step(self, q, k, v, k_cache, v_cache, slot_mapping, block_table, seq_lens, scale):
        # A row with slot < 0 is not compared: hit a row that is.
        cached = (seq_lens.long() - 1).masked_fill(slot_mapping < 0, -1)
        table = shifted(block_table, cached, k_cache.shape[1], k_cache.shape[0])
        out = decode_attention(q, k_cache, v_cache, table, seq_lens, scale,
                               fresh_k=k, fresh_v=v, split_pages=self.split_pages)
        self.write(k_cache, slot_mapping, k)
        self.write(v_cache, slot_mapping, v)
        return out

    def prefill_step(self, q, k, v, k_cache, v_cache, slot_mapping, block_table, cu_seqlens,
                     context_lens, scale):
        table = shifted(block_table, context_lens.long(), k_cache.shape[1], k_cache.shape[0])
        out = prefill_core(q, k_cache, v_cache, table, cu_seqlens, context_lens, scale,
                           fresh_k=k, fresh_v=v, split_pages=self.split_pages, q_tile=self.q_tile)
        self.write(k_cache, slot_mapping, k)
        self.write(v_cache, slot_mapping, v)
        return out


_KERNEL = OffByOnePage()
fused_rope_decode_attention = _KERNEL.fused_rope_decode_attention
prefill_attention = _KERNEL.prefill_attention
decode_layers = _KERNEL.decode_layers
