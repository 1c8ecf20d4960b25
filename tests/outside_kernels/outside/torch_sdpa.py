"""Attention through ``torch.nn.functional.scaled_dot_product_attention`` over gathered pages, in fp32.

The prologue (QK-norm, RoPE) is written directly in fp32; the fresh q/k/v are kept in fp32
(not rounded to bf16) for attention; the context comes from the bf16 cache upcast.  GQA
through SDPA's ``enable_gqa=True``.  Prefill masks with a boolean ``attn_mask``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from outside._paging import decode_with_fresh, gather, prefill_chunks, write
from outside._prologue32 import F32, prologue


# The dtype attention runs in (torch_sdpa_bf16 sets bfloat16: a bf16 model's SDPA call).
ATTN_DTYPE = F32


def _sdpa(q, k, v, scale, mask=None):
    """q [M, Hq, D], k/v [n, Hkv, D] -> [M, Hq, D] (fp32)."""
    q, k, v = (x.to(ATTN_DTYPE).transpose(0, 1)[None] for x in (q, k, v))
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    return o[0].transpose(0, 1).to(F32)


def _sdpa_causal(q, keys, vals, context, scale):
    """A chunk of m queries: query i sees keys 0 .. context + i (a boolean mask, True = attend)."""
    i = torch.arange(q.shape[0], device=q.device)[:, None]
    j = torch.arange(keys.shape[0], device=q.device)[None, :]
    return _sdpa(q, keys, vals, scale, mask=j <= context + i)


def rope_kv_write(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                  positions, slot_mapping, eps, k_cache, v_cache, query):
    q, k, v = prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                       positions, eps)
    query.copy_(q)
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)


def paged_decode_attention(*, query, block_table, seq_lens, scale, k_cache, v_cache, out):
    for b in range(query.shape[0]):
        n = int(seq_lens[b])
        out[b] = _sdpa(query[b:b + 1].to(F32), gather(k_cache, block_table[b], n, F32),
                       gather(v_cache, block_table[b], n, F32), scale)[0]


def fused_rope_decode_attention(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos,
                                rope_sin, positions, slot_mapping, block_table, seq_lens, scale, eps, k_cache,
                                v_cache, out, query):
    q, k, v = prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                       positions, eps)
    result = decode_with_fresh(_sdpa, q, k, v, block_table, seq_lens, k_cache, v_cache, scale)
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)
    out.copy_(result)
    query.copy_(q)


def prefill_attention(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                      positions, slot_mapping, cu_seqlens, context_lens, block_table, scale, eps, k_cache, v_cache,
                      out):
    q, k, v = prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                       positions, eps)
    result = prefill_chunks(_sdpa_causal, q, k, v, cu_seqlens, context_lens, block_table, k_cache, v_cache, scale)
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)
    out.copy_(result)
