"""transformers-qwen3: the ops from transformers' Qwen3 building blocks, as an fp32 model runs them.

``Qwen3RMSNorm`` for QK-norm and the layer norms, ``apply_rotary_pos_emb`` fed the contract's
own ``rope_cos``/``rope_sin`` rows, ``eager_attention_forward`` for decode,
``sdpa_attention_forward`` (transformers' SDPA integration) for prefill, and for
``decode_layers`` one ``Qwen3DecoderLayer`` (weights copied in: the contract's projections
are ``[in, out]``, ``nn.Linear`` holds ``[out, in]``) applied once per layer, with a cache
object whose ``update`` returns the layer's paged context plus the fresh k/v, as
transformers' ``Cache.update`` does.  Everything is fp32; only the stores round.

The adapters hand the functions per-layer caches (``per_layer``), lengths as ints
(``fia_pages``), and copy what they return into the harness's buffers (``returns``).
transformers is optional (the harness's ``transformers`` extra); it is imported here,
in the worker, when a case names this kernel.
"""
from __future__ import annotations

import torch
from torch import nn

from harness.adapters import adapt, fia_pages, per_layer, returns
from harness.kernels.adapted._contract import F32, gather, write

def _import_failed(exc: ImportError) -> str:
    """What stopped the import, named: transformers absent, or installed but failing inside (too old,
    or something it imports broken or shadowed), never "install it" when it is installed."""
    import importlib.metadata
    if isinstance(exc, ModuleNotFoundError) and exc.name == "transformers":
        return f"transformers-qwen3 needs `pip install transformers` (>= 4.51): {exc}"
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return f"transformers-qwen3 needs `pip install transformers` (>= 4.51): {exc}"
    return (f"transformers-qwen3: transformers {version} is installed, but importing what this kernel uses "
            f"from it failed (it needs >= 4.51): {exc}")


try:
    from transformers import Qwen3Config
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.models.qwen3.modeling_qwen3 import (
        Qwen3DecoderLayer, Qwen3RMSNorm, apply_rotary_pos_emb, eager_attention_forward,
    )
except ImportError as exc:
    raise ImportError(_import_failed(exc)) from exc

NAME = "transformers-qwen3"


class _Attn(nn.Module):
    """What the attention functions read from their ``module`` argument."""

    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True
        self.eval()


def _norm(weight: torch.Tensor, eps: float) -> Qwen3RMSNorm:
    n = Qwen3RMSNorm(weight.shape[0], eps=eps).to(weight.device)
    n.weight.data.copy_(weight.to(F32))
    return n


def _prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions, eps):
    """q ``[T, Hq, D]``, k/v ``[T, Hkv, D]``, fp32."""
    D, T = q_norm_weight.shape[0], q_proj.shape[0]
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
    """One query row q ``[1, Hq, D]`` over k/v ``[n, Hkv, D]`` -> ``[Hq, D]``."""
    out, _ = eager_attention_forward(_Attn(q.shape[1] // k.shape[1]), _bhsd(q), _bhsd(k), _bhsd(v), None,
                                     scaling=scale)
    return out[0, 0]                  # transformers returns [b, s, H, D]


@torch.no_grad()
def _rope_kv_write(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                   positions, slot_mapping, eps, k_cache, v_cache):
    q, k, v = _prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                        positions, eps)
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)
    return q


@torch.no_grad()
def _paged_decode(*, query, block_table, kv_lens, scale, k_cache, v_cache):
    return torch.stack([_eager(query[b:b + 1].to(F32), gather(k_cache, block_table[b], n),
                               gather(v_cache, block_table[b], n), scale) for b, n in enumerate(kv_lens)])


@torch.no_grad()
def _fused(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
           slot_mapping, block_table, kv_lens, scale, eps, k_cache, v_cache):
    q, k, v = _prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                        positions, eps)
    rows = []
    for b, n in enumerate(kv_lens):
        keys = torch.cat([gather(k_cache, block_table[b], n - 1), k[b:b + 1]])
        vals = torch.cat([gather(v_cache, block_table[b], n - 1), v[b:b + 1]])
        rows.append(_eager(q[b:b + 1], keys, vals, scale))
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)
    return torch.stack(rows), q


@torch.no_grad()
def _prefill(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions,
             slot_mapping, cu_seqlens, context_lens, block_table, kv_lens, scale, eps, k_cache, v_cache):
    q, k, v = _prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                        positions, eps)
    cu, ctx = cu_seqlens.tolist(), context_lens.tolist()
    out = torch.zeros_like(q)
    module = _Attn(q.shape[1] // k.shape[1])
    for b, c in enumerate(ctx):
        lo, hi = cu[b], cu[b + 1]
        if hi == lo:
            continue
        keys = torch.cat([gather(k_cache, block_table[b], c), k[lo:hi]])
        vals = torch.cat([gather(v_cache, block_table[b], c), v[lo:hi]])
        i = torch.arange(hi - lo, device=q.device)[:, None]
        j = torch.arange(kv_lens[b], device=q.device)[None, :]
        o, _ = sdpa_attention_forward(module, _bhsd(q[lo:hi]), _bhsd(keys), _bhsd(vals), (j <= c + i)[None, None],
                                      scaling=scale)
        out[lo:hi] = o[0]
    write(k_cache, slot_mapping, k)
    write(v_cache, slot_mapping, v)
    return out


class _PagedRowCache:
    """``update(k, v, layer_idx)`` as transformers' Cache: one row's paged context plus its fresh k/v."""

    def __init__(self, k_layer, v_layer, block_row, context: int):
        self.k_layer, self.v_layer, self.block_row, self.context = k_layer, v_layer, block_row, context
        self.fresh: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.fresh = (key_states[0, :, 0], value_states[0, :, 0])          # [Hkv, D]
        ctx_k = _bhsd(gather(self.k_layer, self.block_row, self.context))
        ctx_v = _bhsd(gather(self.v_layer, self.block_row, self.context))
        return torch.cat([ctx_k, key_states], dim=2), torch.cat([ctx_v, value_states], dim=2)


def _decoder_layer(config, wq, wk, wv, wo, w_gate, w_up, w_down, q_norm_weight, k_norm_weight, input_rms_weight,
                   post_rms_weight, scale, device):
    layer = Qwen3DecoderLayer(config, layer_idx=0).to(device, F32).eval()
    attn, mlp = layer.self_attn, layer.mlp
    for linear, w in ((attn.q_proj, wq), (attn.k_proj, wk), (attn.v_proj, wv), (attn.o_proj, wo),
                      (mlp.gate_proj, w_gate), (mlp.up_proj, w_up), (mlp.down_proj, w_down)):
        linear.weight.data.copy_(w.to(F32).T)           # ours [in, out], nn.Linear [out, in]
    for norm, w in ((attn.q_norm, q_norm_weight), (attn.k_norm, k_norm_weight),
                    (layer.input_layernorm, input_rms_weight), (layer.post_attention_layernorm, post_rms_weight)):
        norm.weight.data.copy_(w.to(F32))
    attn.scaling = scale
    return layer


@torch.no_grad()
def _decode_layers(*, hidden, input_rms_weight, post_rms_weight, q_norm_weight, k_norm_weight, final_norm_weight,
                   wq, wk, wv, wo, w_gate, w_up, w_down, lm_head, rope_cos, rope_sin, positions, slot_mapping,
                   block_table, kv_lens, num_layers, scale, eps, k_cache, v_cache):
    """``k_cache``, ``v_cache``: one cache per layer; every layer shares the weights, so one
    decoder layer serves them all."""
    H, D = wq.shape[0], q_norm_weight.shape[0]
    config = Qwen3Config(hidden_size=H, intermediate_size=w_gate.shape[1], num_attention_heads=wq.shape[1] // D,
                         num_key_value_heads=wk.shape[1] // D, head_dim=D, rms_norm_eps=eps,
                         vocab_size=lm_head.shape[0], hidden_act="silu", attention_bias=False,
                         num_hidden_layers=num_layers, attn_implementation="eager")
    layer = _decoder_layer(config, wq, wk, wv, wo, w_gate, w_up, w_down, q_norm_weight, k_norm_weight,
                           input_rms_weight, post_rms_weight, scale, hidden.device)
    pos = positions.long()
    cos, sin = rope_cos[pos].to(F32), rope_sin[pos].to(F32)
    r = hidden.to(F32)
    for k_layer, v_layer in zip(k_cache, v_cache):
        rows, fresh = [], []
        for b, n in enumerate(kv_lens):
            cache = _PagedRowCache(k_layer, v_layer, block_table[b], n - 1)
            rows.append(layer(r[b:b + 1, None], position_embeddings=(cos[b:b + 1, None], sin[b:b + 1, None]),
                              cache=cache)[0, 0])
            fresh.append(cache.fresh)
        write(k_layer, slot_mapping, torch.stack([k for k, _ in fresh]))
        write(v_layer, slot_mapping, torch.stack([v for _, v in fresh]))
        r = torch.stack(rows)
    logits = (_norm(final_norm_weight, eps)(r)) @ lm_head.to(F32).T
    return logits, r


_lens = fia_pages(actual_seq_lengths_kv="kv_lens")
rope_kv_write = adapt("rope_kv_write", _rope_kv_write, returns("query"), name=NAME)
paged_decode_attention = adapt("paged_decode_attention", _paged_decode, _lens, returns("out"), name=NAME)
fused_rope_decode_attention = adapt("fused_rope_decode_attention", _fused, _lens, returns("out", "query"), name=NAME)
prefill_attention = adapt("prefill_attention", _prefill, _lens, returns("out"), name=NAME)
decode_layers = adapt("decode_layers", _decode_layers, _lens, per_layer("k_cache", "v_cache"),
                      returns("logits", "next_hidden"), name=NAME)
