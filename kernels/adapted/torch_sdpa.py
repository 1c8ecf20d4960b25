"""torch-sdpa: attention through ``torch.nn.functional.scaled_dot_product_attention``, in fp32.

Written as a library would be: the functions take the sequence lengths as a list of ints
(``fia_pages``) and return their results as new tensors (``returns``); the adapters bind
them to the op contracts.  The fresh q/k/v stay fp32 for attention; the context comes from
the bf16 cache, upcast.  GQA through SDPA's ``enable_gqa=True``; prefill masks with a
boolean ``attn_mask`` (True = attend).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.adapters import adapt, fia_pages, returns
from harness.kernels.adapted._contract import F32, dump_file, gather, prologue, write

NAME = "torch-sdpa"


def sdpa(q, k, v, scale, mask=None):
    """q ``[M, Hq, D]``, k/v ``[n, Hkv, D]`` -> ``[M, Hq, D]`` fp32."""
    q, k, v = (x.to(F32).transpose(0, 1)[None] for x in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)[0].transpose(0, 1)


def _rope_kv_write(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                   positions, slot_mapping, eps, k_cache, v_cache):
    q, k, v = prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                       positions, eps)
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)
    return q


def _paged_decode(*, query, block_table, kv_lens, scale, k_cache, v_cache):
    out = torch.stack([sdpa(query[b:b + 1], gather(k_cache, block_table[b], n), gather(v_cache, block_table[b], n),
                            scale)[0] for b, n in enumerate(kv_lens)])
    dump_file("attn", out)
    return out


def _fused(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
           slot_mapping, block_table, kv_lens, scale, eps, k_cache, v_cache):
    q, k, v = prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                       positions, eps)
    rows = []
    for b, n in enumerate(kv_lens):              # the context, then this token's fresh k/v
        keys = torch.cat([gather(k_cache, block_table[b], n - 1), k[b:b + 1]])
        vals = torch.cat([gather(v_cache, block_table[b], n - 1), v[b:b + 1]])
        rows.append(sdpa(q[b:b + 1], keys, vals, scale)[0])
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)
    dump_file("attn", torch.stack(rows))
    return torch.stack(rows), q


def _prefill(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
             slot_mapping, cu_seqlens, context_lens, block_table, kv_lens, scale, eps, k_cache, v_cache):
    q, k, v = prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                       positions, eps)
    cu, ctx = cu_seqlens.tolist(), context_lens.tolist()
    out = torch.empty_like(q)
    for b, c in enumerate(ctx):
        lo, hi = cu[b], cu[b + 1]
        keys = torch.cat([gather(k_cache, block_table[b], c), k[lo:hi]])
        vals = torch.cat([gather(v_cache, block_table[b], c), v[lo:hi]])
        causal = torch.arange(kv_lens[b], device=q.device)[None, :] <= c + torch.arange(hi - lo, device=q.device)[:, None]
        out[lo:hi] = sdpa(q[lo:hi], keys, vals, scale, mask=causal)
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)
    dump_file("attn", out)
    return out


_lens = fia_pages(actual_seq_lengths_kv="kv_lens")
rope_kv_write = adapt("rope_kv_write", _rope_kv_write, returns("query"), name=NAME)
paged_decode_attention = adapt("paged_decode_attention", _paged_decode, _lens, returns("out"), name=NAME)
fused_rope_decode_attention = adapt("fused_rope_decode_attention", _fused, _lens, returns("out", "query"), name=NAME)
prefill_attention = adapt("prefill_attention", _prefill, _lens, returns("out"), name=NAME)
