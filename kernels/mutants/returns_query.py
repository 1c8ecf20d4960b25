"""Mutant: the fused kernel returns the rotated query instead of the attention output.

Real bug: a fused RoPE + decode-attention kernel bound its result to the
wrong buffer.  ``query`` and the cache writes are correct, but the kernel
returns ``query`` as its result and ``out`` is never written (the harness's
poison stays in it).  Downstream, 99.7% of ``attn_out`` was wrong while final
logits still looked plausible; only per-element checks of intermediates and
of the returned buffer catch it.
"""
from __future__ import annotations

from harness.kernels.reference import ReferenceKernel, no_dump


class ReturnsQuery(ReferenceKernel):
    def fused_rope_decode_attention(self, q_proj, k_proj, v_proj, inv_rms, q_norm_weight,
                                    k_norm_weight, rope_cos, rope_sin, positions, slot_mapping,
                                    block_table, seq_lens, scale, eps, k_cache, v_cache, out, query, dump=None):
        q, k, v = self.project(q_proj * inv_rms, k_proj * inv_rms, v_proj * inv_rms,
                               q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions, eps, k_cache.dtype,
                               dump or no_dump)   # its intermediates are right: the bug is after them
        query.copy_(q)
        self.write(k_cache, slot_mapping, k)
        self.write(v_cache, slot_mapping, v)
        return query                      # the bug: the wrong buffer; `out` is left as it was


_KERNEL = ReturnsQuery()
fused_rope_decode_attention = _KERNEL.fused_rope_decode_attention
