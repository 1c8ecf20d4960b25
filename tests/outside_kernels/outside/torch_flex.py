"""Attention through ``torch.nn.attention.flex_attention`` (eager, so it runs on the CPU), in fp32.

Not ``torch.nn.attention.experimental._paged_attention.PagedAttention``: it owns page
allocation (``reserve``/``assign`` fill its own ``page_table``) and wants the cache as
``[1, H, pages*P, D]``, while the contract hands a caller-built ``block_table`` and a
``[N, P, Hkv, D]`` cache.  So pages are gathered per sequence (padded to the longest),
and a ``create_block_mask`` mask_mod hides the padding (decode) or applies the causal
rule after the context (prefill); GQA through ``enable_gqa=True``.  Fresh q/k/v stay fp32.
"""
from __future__ import annotations

import warnings

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from outside._paging import gather, prefill_chunks, write
from outside._prologue32 import F32, prologue

warnings.filterwarnings("ignore", message=".*flex_attention.*")


def _padded(cache, block_table, lengths, device):
    """``[B, Hkv, maxlen, D]`` of each row's positions ``0..lengths[b]-1``, zero-padded."""
    longest = max(max(lengths), 1)
    B, Hkv, D = len(lengths), cache.shape[2], cache.shape[3]
    x = torch.zeros(B, longest, Hkv, D, dtype=F32, device=device)
    for b, n in enumerate(lengths):
        x[b, :n] = gather(cache, block_table[b], n, F32)
    return x


def _decode(q, keys, vals, lengths, scale):
    """q [B, Hq, D]; keys/vals [B, n, Hkv, D]; row b sees its first lengths[b] keys."""
    B, n = keys.shape[0], keys.shape[1]
    L = torch.tensor(lengths, device=q.device)

    def visible(b, h, q_idx, kv_idx):
        return kv_idx < L[b]

    mask = create_block_mask(visible, B, None, 1, n, device=str(q.device))
    o = flex_attention(q[:, :, None], keys.transpose(1, 2), vals.transpose(1, 2), block_mask=mask,
                       scale=scale, enable_gqa=True)
    return o[:, :, 0]


def paged_decode_attention(*, query, block_table, seq_lens, scale, k_cache, v_cache, out):
    lengths = seq_lens.tolist()
    keys = _padded(k_cache, block_table, lengths, query.device)
    vals = _padded(v_cache, block_table, lengths, query.device)
    out.copy_(_decode(query.to(F32), keys, vals, lengths, scale))


def fused_rope_decode_attention(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos,
                                rope_sin, positions, slot_mapping, block_table, seq_lens, scale, eps, k_cache,
                                v_cache, out, query):
    q, k, v = prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                       positions, eps)
    lengths = seq_lens.tolist()
    context = [n - 1 for n in lengths]
    keys = _padded(k_cache, block_table, lengths, q.device)       # room for the current token
    vals = _padded(v_cache, block_table, lengths, q.device)
    for b, c in enumerate(context):
        keys[b, c:] = 0
        vals[b, c:] = 0
        keys[b, c], vals[b, c] = k[b], v[b]
    result = _decode(q, keys, vals, lengths, scale)
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)
    out.copy_(result)
    query.copy_(q)


def _flex_causal(q, keys, vals, context, scale):
    """A chunk of m queries: query i sees keys 0 .. context + i, as a flex_attention block mask."""
    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + context

    mask = create_block_mask(causal, 1, None, q.shape[0], keys.shape[0], device=str(q.device))
    o = flex_attention(q.transpose(0, 1)[None], keys.transpose(0, 1)[None], vals.transpose(0, 1)[None],
                       block_mask=mask, scale=scale, enable_gqa=True)
    return o[0].transpose(0, 1)


def prefill_attention(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                      positions, slot_mapping, cu_seqlens, context_lens, block_table, scale, eps, k_cache, v_cache,
                      out):
    q, k, v = prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                       positions, eps)
    result = prefill_chunks(_flex_causal, q, k, v, cu_seqlens, context_lens, block_table, k_cache, v_cache, scale)
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)
    out.copy_(result)
