"""Golden of ``decode_layers``: L decoder layers (one generated layer applied L times), final norm, LM head.

The contract (docs/contracts.md), per batch row, all math in the requested dtype (bf16 weights and
``hidden`` upcast to it)::

    r = hidden
    for l in range(num_layers):                     # same weights, cache k_cache[l] / v_cache[l]
        h = rmsnorm(r) * input_rms_weight
        q, k, v = h @ wq, h @ wk, h @ wv            # split into heads
        q, k = QK-norm + NeoX RoPE at positions     # as in rope_kv_write, but no inv_rms here
        attn = attention as in fused_rope_decode_attention, over layer l's cache
        r = r + attn.reshape(B, Hq*D) @ wo
        h = rmsnorm(r) * post_rms_weight
        r = r + (silu(h @ w_gate) * (h @ w_up)) @ w_down
    logits = (rmsnorm(r) * final_norm_weight) @ lm_head.T
    next_hidden = r

with ``rmsnorm(x) = x * rsqrt(mean(x²) + eps)`` and the one ``eps`` for every norm.

Our readings (as in the fused decode golden): attention consumes q, k and v
rounded to bf16 (``rounding=False``: unrounded, the other correct reading,
returned as ``<name>@exact`` for every output); positions ``0..seq_len-2`` come from layer l's pre-launch cache
(physical gather), the current token from the fresh k/v, whatever its slot.
Every row is computed; the checker ignores rows whose slot is < 0.
``next_hidden`` is the exact residual (the checker compares it with the
kernel's bf16).

Intermediates (``record``): per layer ``l`` ``layers.{l}.q_norm``, ``.k_norm``, ``.q_rope``, ``.k_rope``, ``.v``, ``.attn``
and ``.hidden`` (the residual after the layer), then ``final_norm``.

Returns ``logits [B, V]``, ``next_hidden [B, H]`` and the k/v rows each layer
would write, ``k_cache``/``v_cache`` ``[num_layers, B, Hkv, D]``, exact.

Memory: the layer weights are upcast once (they are shared by every layer), the
LM head in blocks of ``LM_HEAD_ROWS`` vocab rows, the cache only row by row of
the positions attended.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from harness.goldens.common import (
    GoldenInputError, Record, no_record, decode_attention, qk_norm, rms_norm, rope, rope_rows, split_heads,
    stored_if,
)

LAYER_WEIGHTS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
NORM_WEIGHTS = ("input_rms_weight", "post_rms_weight", "q_norm_weight", "k_norm_weight", "final_norm_weight")
LM_HEAD_ROWS = 16384


# Outputs the bf16 rounding of q/k/v before attention changes (``rounding=False``: none).
ROUNDING_CHANGES = ("logits", "next_hidden", "k_cache", "v_cache")


def compute(inputs: Mapping[str, Any], dtype: torch.dtype, rounding: bool = True,
            record: Record | None = None) -> dict[str, torch.Tensor]:
    as_stored = stored_if(rounding, inputs["k_cache"].dtype)
    record = record or no_record
    num_layers = int(inputs["num_layers"])
    cache_layers = inputs["k_cache"].shape[0]
    if not 1 <= num_layers <= cache_layers:
        raise GoldenInputError(f"num_layers = {num_layers}, but the caches hold {cache_layers} layers")
    head_dim = inputs["q_norm_weight"].shape[0]
    eps, scale = float(inputs["eps"]), float(inputs["scale"])
    w = {name: inputs[name].to(dtype) for name in LAYER_WEIGHTS + NORM_WEIGHTS}
    cos, sin = rope_rows(inputs, dtype)

    r = inputs["hidden"].to(dtype)
    k_rows, v_rows = [], []
    for layer in range(num_layers):
        h = rms_norm(r, eps) * w["input_rms_weight"]
        q = qk_norm(split_heads(h @ w["wq"], head_dim), w["q_norm_weight"], eps)
        k = qk_norm(split_heads(h @ w["wk"], head_dim), w["k_norm_weight"], eps)
        record(f"layers.{layer}.q_norm", q)
        record(f"layers.{layer}.k_norm", k)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        v = split_heads(h @ w["wv"], head_dim)
        attn = decode_attention(
            as_stored(q), as_stored(k), as_stored(v), inputs["k_cache"][layer], inputs["v_cache"][layer],
            inputs["block_table"], inputs["seq_lens"], scale,
        )
        r = r + attn.reshape(r.shape[0], -1) @ w["wo"]
        h = rms_norm(r, eps) * w["post_rms_weight"]
        r = r + (torch.nn.functional.silu(h @ w["w_gate"]) * (h @ w["w_up"])) @ w["w_down"]
        k_rows.append(k)
        v_rows.append(v)
        for part, t in (("q_rope", q), ("k_rope", k), ("v", v), ("attn", attn), ("hidden", r)):
            record(f"layers.{layer}.{part}", t)

    final = rms_norm(r, eps) * w["final_norm_weight"]
    record("final_norm", final)
    logits = _lm_head(final, inputs["lm_head"], dtype)
    return {"logits": logits, "next_hidden": r, "k_cache": torch.stack(k_rows), "v_cache": torch.stack(v_rows)}


def _lm_head(x: torch.Tensor, lm_head: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x @ lm_head.T`` with ``lm_head [V, H]`` upcast a block of vocab rows at a time."""
    blocks = [x @ lm_head[start:start + LM_HEAD_ROWS].to(dtype).T
              for start in range(0, lm_head.shape[0], LM_HEAD_ROWS)]
    return torch.cat(blocks, dim=1)
