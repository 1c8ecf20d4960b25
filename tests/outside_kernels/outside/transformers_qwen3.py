"""The ops assembled from transformers' Qwen3 building blocks, as an fp32 model runs them.

``Qwen3RMSNorm`` for QK-norm and the layer norms, ``apply_rotary_pos_emb`` (fed the
contract's own ``rope_cos``/``rope_sin`` rows), ``eager_attention_forward`` for decode,
``sdpa_attention_forward`` (transformers' SDPA integration) for prefill, and for
``decode_layers`` one ``Qwen3DecoderLayer`` (weights copied in: our projections are
``[in, out]``, ``nn.Linear`` holds ``[out, in]``) applied ``num_layers`` times, with a
small cache object whose ``update`` returns the layer's paged context plus the fresh
k/v, as transformers' ``Cache.update`` does.  Everything is fp32; the fresh q/k/v are
not rounded to bf16 before attention (only the stores round).
"""
from __future__ import annotations

import torch
from torch import nn
from transformers import Qwen3Config
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3DecoderLayer, Qwen3RMSNorm, apply_rotary_pos_emb, eager_attention_forward,
)

from outside._paging import decode_with_fresh, gather, prefill_chunks, write

F32 = torch.float32


class _Attn(nn.Module):
    """What the attention functions read from their ``module`` argument."""

    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True
        self.eval()


def _norm(weight: torch.Tensor, eps: float) -> Qwen3RMSNorm:
    n = Qwen3RMSNorm(weight.shape[0], eps=eps).to(weight.device)
    with torch.no_grad():
        n.weight.copy_(weight.to(F32))
    return n


def _prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions, eps):
    """q [T, Hq, D], k/v [T, Hkv, D] in fp32."""
    D = q_norm_weight.shape[0]
    T = q_proj.shape[0]
    s = inv_rms.to(F32)
    q = _norm(q_norm_weight, eps)((q_proj.to(F32) * s).view(T, -1, D))
    k = _norm(k_norm_weight, eps)((k_proj.to(F32) * s).view(T, -1, D))
    v = (v_proj.to(F32) * s).view(T, -1, D)
    pos = positions.long()
    q, k = apply_rotary_pos_emb(q, k, rope_cos[pos].to(F32), rope_sin[pos].to(F32), unsqueeze_dim=1)
    return q, k, v


def _bhsd(x):       # [n, H, D] -> [1, H, n, D]
    return x.transpose(0, 1)[None]


def _eager(q, k, v, scale):
    """One query row q [1, Hq, D] over k/v [n, Hkv, D]."""
    out, _ = eager_attention_forward(_Attn(q.shape[1] // k.shape[1]), _bhsd(q), _bhsd(k), _bhsd(v), None,
                                     scaling=scale)
    return out[0]                     # [1, Hq, D] (transformers returns [b, s, H, D])


def _sdpa_causal(q, keys, vals, context, scale):
    """A chunk of m queries through transformers' SDPA function: query i sees keys 0 .. context + i."""
    i = torch.arange(q.shape[0], device=q.device)[:, None]
    j = torch.arange(keys.shape[0], device=q.device)[None, :]
    mask = (j <= context + i)[None, None]                 # bool, True = attend (SDPA's convention)
    o, _ = sdpa_attention_forward(_Attn(q.shape[1] // keys.shape[1]), _bhsd(q), _bhsd(keys), _bhsd(vals), mask,
                                  scaling=scale)
    return o[0]


def rope_kv_write(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                  positions, slot_mapping, eps, k_cache, v_cache, query):
    with torch.no_grad():
        q, k, v = _prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                            positions, eps)
        query.copy_(q)
        write(k_cache, slot_mapping, k)
        write(v_cache, slot_mapping, v)


def paged_decode_attention(*, query, block_table, seq_lens, scale, k_cache, v_cache, out):
    with torch.no_grad():
        for b in range(query.shape[0]):
            n = int(seq_lens[b])
            out[b] = _eager(query[b:b + 1].to(F32), gather(k_cache, block_table[b], n, F32),
                            gather(v_cache, block_table[b], n, F32), scale)[0]


def fused_rope_decode_attention(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos,
                                rope_sin, positions, slot_mapping, block_table, seq_lens, scale, eps, k_cache,
                                v_cache, out, query):
    with torch.no_grad():
        q, k, v = _prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                            positions, eps)
        result = decode_with_fresh(_eager, q, k, v, block_table, seq_lens, k_cache, v_cache, scale)
        write(k_cache, slot_mapping, k)
        write(v_cache, slot_mapping, v)
        out.copy_(result)
        query.copy_(q)


def prefill_attention(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                      positions, slot_mapping, cu_seqlens, context_lens, block_table, scale, eps, k_cache, v_cache,
                      out):
    with torch.no_grad():
        q, k, v = _prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                            positions, eps)
        result = prefill_chunks(_sdpa_causal, q, k, v, cu_seqlens, context_lens, block_table, k_cache, v_cache,
                                scale)
        write(k_cache, slot_mapping, k)
        write(v_cache, slot_mapping, v)
        out.copy_(result)


class _PagedRowCache:
    """``update(k, v, layer_idx)`` as transformers' Cache: the row's paged context plus the fresh k/v."""

    def __init__(self, k_cache, v_cache, block_table, seq_lens):
        self.k_cache, self.v_cache, self.block_table, self.seq_lens = k_cache, v_cache, block_table, seq_lens
        self.layer = self.row = 0
        self.fresh_k: list[torch.Tensor] = []
        self.fresh_v: list[torch.Tensor] = []

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        n = int(self.seq_lens[self.row]) - 1
        ctx_k = gather(self.k_cache[self.layer], self.block_table[self.row], n, F32)
        ctx_v = gather(self.v_cache[self.layer], self.block_table[self.row], n, F32)
        self.fresh_k.append(key_states[0, :, 0])        # [Hkv, D]
        self.fresh_v.append(value_states[0, :, 0])
        return (torch.cat([_bhsd(ctx_k), key_states], dim=2), torch.cat([_bhsd(ctx_v), value_states], dim=2))


def decode_layers(*, hidden, input_rms_weight, post_rms_weight, q_norm_weight, k_norm_weight, final_norm_weight,
                  wq, wk, wv, wo, w_gate, w_up, w_down, lm_head, rope_cos, rope_sin, positions, slot_mapping,
                  block_table, seq_lens, num_layers, scale, eps, k_cache, v_cache, logits, next_hidden):
    H, I = wq.shape[0], w_gate.shape[1]
    D = q_norm_weight.shape[0]
    Hq, Hkv = wq.shape[1] // D, wk.shape[1] // D
    config = Qwen3Config(hidden_size=H, intermediate_size=I, num_attention_heads=Hq, num_key_value_heads=Hkv,
                         head_dim=D, rms_norm_eps=eps, vocab_size=lm_head.shape[0], hidden_act="silu",
                         attention_bias=False, num_hidden_layers=num_layers, attn_implementation="eager")
    device = hidden.device
    layer = Qwen3DecoderLayer(config, layer_idx=0).to(device, F32).eval()
    final_norm = _norm(final_norm_weight, eps)
    head = nn.Linear(H, lm_head.shape[0], bias=False).to(device, F32)
    with torch.no_grad():
        attn, mlp = layer.self_attn, layer.mlp
        for linear, w in ((attn.q_proj, wq), (attn.k_proj, wk), (attn.v_proj, wv), (attn.o_proj, wo),
                          (mlp.gate_proj, w_gate), (mlp.up_proj, w_up), (mlp.down_proj, w_down)):
            linear.weight.copy_(w.to(F32).T)                # ours [in, out], nn.Linear [out, in]
        for norm, w in ((attn.q_norm, q_norm_weight), (attn.k_norm, k_norm_weight),
                        (layer.input_layernorm, input_rms_weight), (layer.post_attention_layernorm, post_rms_weight)):
            norm.weight.copy_(w.to(F32))
        attn.scaling = scale
        head.weight.copy_(lm_head.to(F32))

        pos = positions.long()
        cos, sin = rope_cos[pos].to(F32), rope_sin[pos].to(F32)
        r = hidden.to(F32)
        for l in range(num_layers):
            cache = _PagedRowCache(k_cache, v_cache, block_table, seq_lens)
            cache.layer = l
            rows = []
            for b in range(r.shape[0]):
                cache.row = b
                rows.append(layer(r[b:b + 1, None], position_embeddings=(cos[b:b + 1, None], sin[b:b + 1, None]),
                                  cache=cache)[0, 0])
            write(k_cache[l], slot_mapping, torch.stack(cache.fresh_k))
            write(v_cache[l], slot_mapping, torch.stack(cache.fresh_v))
            r = torch.stack(rows)
        logits.copy_(head(final_norm(r)))
        next_hidden.copy_(r)
