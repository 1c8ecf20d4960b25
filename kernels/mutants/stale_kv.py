"""Mutant: attention reads the token just computed from the cache before its write lands.

Real bug: a missing pipeline barrier between the cache-write stage and the
attention stage of a fused kernel (a read-after-write hazard).  The attention
gathers the current token's k/v (decode) or the chunk's k/v (prefill) from the
cache, where the write has not landed yet, so it sees the old row (the
harness's canary).  The cache ends up correct; the attention output is wrong.
"""
from __future__ import annotations

from harness.kernels.reference import ReferenceKernel, decode_attention, prefill_core


class StaleKV(ReferenceKernel):
    def decode_step(self, q, k, v, k_cache, v_cache, slot_mapping, block_table, seq_lens, scale):
        out = decode_attention(q, k_cache, v_cache, block_table, seq_lens, scale,
                               split_pages=self.split_pages)      # position seq_len-1 from the cache
        self.write(k_cache, slot_mapping, k)
        self.write(v_cache, slot_mapping, v)
        return out

    def prefill_step(self, q, k, v, k_cache, v_cache, slot_mapping, block_table, cu_seqlens,
                     context_lens, scale):
        out = prefill_core(q, k_cache, v_cache, block_table, cu_seqlens, context_lens, scale,
                           split_pages=self.split_pages, q_tile=self.q_tile)  # chunk rows from the cache
        self.write(k_cache, slot_mapping, k)
        self.write(v_cache, slot_mapping, v)
        return out


_KERNEL = StaleKV()
fused_rope_decode_attention = _KERNEL.fused_rope_decode_attention
prefill_attention = _KERNEL.prefill_attention
decode_layers = _KERNEL.decode_layers
