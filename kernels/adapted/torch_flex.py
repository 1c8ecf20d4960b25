"""torch-flex: attention through ``torch.nn.attention.flex_attention`` (eager: it runs on the CPU), fp32.

Not ``torch.nn.attention.experimental._paged_attention.PagedAttention``: that class allocates
pages itself and wants the cache as ``[1, H, pages*P, D]``, while the contract hands a
caller-built block table over ``[N, P, Hkv, D]``.  So each sequence's positions are gathered
(padded to the longest), and a ``create_block_mask`` mask hides the padding (decode) or
applies the causal rule after the context (prefill); GQA through ``enable_gqa=True``.
Lengths come as a list of ints (``fia_pages``) and results are returned (``returns``).
"""
from __future__ import annotations

import warnings

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from harness.adapters import adapt, fia_pages, returns
from harness.kernels.adapted._contract import F32, dump_file, gather, prologue, write

NAME = "torch-flex"


def _padded(cache, block_table, lengths, fresh=None):
    """``[B, Hkv, longest, D]``: row b's first ``lengths[b]`` positions (the last one ``fresh[b]``
    when given: the current token, not yet in the cache), zeros after."""
    x = torch.zeros(len(lengths), max(max(lengths), 1), cache.shape[2], cache.shape[3], dtype=F32,
                    device=cache.device)
    for b, n in enumerate(lengths):
        if fresh is None:
            x[b, :n] = gather(cache, block_table[b], n)
        else:
            x[b, :n - 1] = gather(cache, block_table[b], n - 1)
            x[b, n - 1] = fresh[b]
    return x.transpose(1, 2)


def _flex(q, keys, vals, mask_mod, batch, q_len, scale):
    with warnings.catch_warnings():          # eager flex_attention warns that it is not compiled
        warnings.simplefilter("ignore")
        mask = create_block_mask(mask_mod, batch, None, q_len, keys.shape[2], device=str(q.device))
        return flex_attention(q, keys, vals, block_mask=mask, scale=scale, enable_gqa=True)


def _decode(q, keys, vals, lengths, scale):
    """q ``[B, Hq, D]``; keys/vals ``[B, Hkv, n, D]``; row b sees its first ``lengths[b]`` keys."""
    limit = torch.tensor(lengths, device=q.device)

    def visible(b, h, q_idx, kv_idx):
        return kv_idx < limit[b]

    return _flex(q[:, :, None], keys, vals, visible, len(lengths), 1, scale)[:, :, 0]


def _paged_decode(*, query, block_table, kv_lens, scale, k_cache, v_cache):
    out = _decode(query.to(F32), _padded(k_cache, block_table, kv_lens), _padded(v_cache, block_table, kv_lens),
                  kv_lens, scale)
    dump_file("attn", out)
    return out


def _fused(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
           slot_mapping, block_table, kv_lens, scale, eps, k_cache, v_cache):
    q, k, v = prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                       positions, eps)
    out = _decode(q, _padded(k_cache, block_table, kv_lens, k), _padded(v_cache, block_table, kv_lens, v),
                  kv_lens, scale)
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)
    dump_file("attn", out)
    return out, q


def _prefill(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
             slot_mapping, cu_seqlens, context_lens, block_table, kv_lens, scale, eps, k_cache, v_cache):
    q, k, v = prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                       positions, eps)
    cu, ctx = cu_seqlens.tolist(), context_lens.tolist()
    out = torch.zeros_like(q)
    for b, c in enumerate(ctx):
        lo, hi = cu[b], cu[b + 1]
        if hi == lo:
            continue
        keys = torch.cat([gather(k_cache, block_table[b], c), k[lo:hi]]).transpose(0, 1)[None]
        vals = torch.cat([gather(v_cache, block_table[b], c), v[lo:hi]]).transpose(0, 1)[None]

        def causal(bb, h, q_idx, kv_idx, c=c):
            return kv_idx <= q_idx + c

        out[lo:hi] = _flex(q[lo:hi].transpose(0, 1)[None], keys, vals, causal, 1, hi - lo, scale)[0].transpose(0, 1)
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)
    dump_file("attn", out)
    return out


_lens = fia_pages(actual_seq_lengths_kv="kv_lens")
paged_decode_attention = adapt("paged_decode_attention", _paged_decode, _lens, returns("out"), name=NAME)
fused_rope_decode_attention = adapt("fused_rope_decode_attention", _fused, _lens, returns("out", "query"), name=NAME)
prefill_attention = adapt("prefill_attention", _prefill, _lens, returns("out"), name=NAME)
