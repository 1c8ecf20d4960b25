"""The QK-norm/RoPE prologue as a bf16 transformers model computes it; attention in fp32.

A bf16 Qwen3 model holds the projections, norm weights and RoPE tables in bf16:
``Qwen3RMSNorm`` upcasts for the variance, rounds the normalised row back to bf16 and
multiplies by its bf16 weight (one more rounding); ``apply_rotary_pos_emb`` runs in bf16
(a rounding after each product and after the sum).  So ``query`` and the k rows carry
several bf16 roundings, v one (the scaled projection).  Attention reads those bf16 values
in fp32 through transformers' own functions (``outside.transformers_qwen3``).  Correct for a
bf16-compute kernel: it passes under ``precision: bf16-compute`` (docs/contracts.md,
"Precision presets"), not under the default ``fp32-compute``.
"""
from __future__ import annotations

import torch
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm, apply_rotary_pos_emb

from outside._paging import decode_with_fresh, prefill_chunks, write
from outside.transformers_qwen3 import _eager, _sdpa_causal

F32, BF16 = torch.float32, torch.bfloat16


def _norm(weight: torch.Tensor, eps: float) -> Qwen3RMSNorm:
    n = Qwen3RMSNorm(weight.shape[0], eps=eps).to(weight.device, BF16)
    with torch.no_grad():
        n.weight.copy_(weight.to(BF16))
    return n


def _prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin, positions, eps):
    """q [T, Hq, D], k/v [T, Hkv, D] in bf16, as a bf16 model has them."""
    D = q_norm_weight.shape[0]
    T = q_proj.shape[0]
    s = inv_rms.to(F32)
    q, k, v = ((p.to(F32) * s).to(BF16).view(T, -1, D) for p in (q_proj, k_proj, v_proj))
    q, k = _norm(q_norm_weight, eps)(q), _norm(k_norm_weight, eps)(k)
    pos = positions.long()
    q, k = apply_rotary_pos_emb(q, k, rope_cos[pos].to(BF16), rope_sin[pos].to(BF16), unsqueeze_dim=1)
    return q, k, v


def rope_kv_write(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                  positions, slot_mapping, eps, k_cache, v_cache, query):
    with torch.no_grad():
        q, k, v = _prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                            positions, eps)
        query.copy_(q)
        write(k_cache, slot_mapping, k)
        write(v_cache, slot_mapping, v)


def fused_rope_decode_attention(*, q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos,
                                rope_sin, positions, slot_mapping, block_table, seq_lens, scale, eps, k_cache,
                                v_cache, out, query):
    with torch.no_grad():
        q, k, v = _prologue(q_proj, k_proj, v_proj, inv_rms, q_norm_weight, k_norm_weight, rope_cos, rope_sin,
                            positions, eps)
        q32, k32, v32 = q.to(F32), k.to(F32), v.to(F32)
        result = decode_with_fresh(_eager, q32, k32, v32, block_table, seq_lens, k_cache, v_cache, scale)
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
        result = prefill_chunks(_sdpa_causal, q.to(F32), k.to(F32), v.to(F32), cu_seqlens, context_lens,
                                block_table, k_cache, v_cache, scale)
        write(k_cache, slot_mapping, k)
        write(v_cache, slot_mapping, v)
        out.copy_(result)
