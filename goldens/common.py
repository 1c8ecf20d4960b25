"""Golden-only helpers: the pieces of math that more than one golden needs.

Written straight from the contract in docs/contracts.md, for clarity over speed, and sharing no code
with any kernel.  Every function computes in the dtype of the tensors it is
given (the caller upcasts first), never changes its arguments, and returns new
tensors.

Shapes: ``rows`` is a batch row (decode) or a packed token (prefill); a
"heads" tensor is ``[rows, heads, D]``; a cache is ``[N, P, Hkv, D]`` in the stored dtype
(bf16, or fp16 for a ``dtype: fp16`` case).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

# Query rows per block when a golden attends many queries at once (prefill), so
# the score matrix stays small: 256 × 3756 keys × 40 heads × 8 bytes ≈ 300 MB.
QUERY_BLOCK = 256


class GoldenInputError(ValueError):
    """The inputs break the op contract (not a bug in the golden)."""


# ``record(name, tensor)``: a golden hands each named intermediate (docs/intermediates.md) to it
# as it computes it; the golden's result does not depend on it.
Record = Callable[[str, torch.Tensor], None]


def no_record(name: str, tensor: torch.Tensor) -> None:
    return None


# -- elementwise pieces ---------------------------------------------------------------

def rms_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * rsqrt(mean(x²) + eps)`` over the last axis (no weight)."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """NeoX rotate-half: ``[x₁, x₂] -> [-x₂, x₁]`` with the halves split at D/2 (not GPT-J pairs)."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """NeoX RoPE of ``x [rows, heads, D]`` with per-row tables ``cos, sin [rows, D]``."""
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


def as_stored(x: torch.Tensor, stored: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """The value ``x`` has once stored in a ``stored`` tensor (query output, KV cache), back in x's dtype."""
    return x.to(stored).to(x.dtype)


def stored_if(rounding: bool, stored: torch.dtype = torch.bfloat16):
    """``as_stored`` in ``stored`` (the caches' dtype) when the golden reads attention inputs as
    stored, else the identity."""
    return (lambda x: as_stored(x, stored)) if rounding else (lambda x: x)


def split_heads(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    """``[rows, heads*D] -> [rows, heads, D]``."""
    rows, width = x.shape
    return x.reshape(rows, width // head_dim, head_dim)


# -- the rope_kv_write prologue ----------------------------------------------------------

def rope_rows(inputs: Mapping[str, Any], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The given tables at each row's position (tables are used as given, never recomputed)."""
    positions = inputs["positions"].long()
    return inputs["rope_cos"][positions].to(dtype), inputs["rope_sin"][positions].to(dtype)


def qk_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-head QK-norm: ``rms_norm(x) * weight`` over D (the ``q_norm``/``k_norm`` intermediates)."""
    return rms_norm(x, eps) * weight


def qk_norm_rope(x: torch.Tensor, weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 eps: float) -> torch.Tensor:
    """Per-head QK-norm (``rms_norm(x) * weight`` over D), then NeoX RoPE."""
    return rope(qk_norm(x, weight, eps), cos, sin)


def rope_kv_rows(inputs: Mapping[str, Any], dtype: torch.dtype, record: Record | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q ``[rows, Hq, D]``, k and v ``[rows, Hkv, D]`` of the rope_kv_write prologue, exact in dtype.

    ``x = proj * inv_rms`` for q, k and v; QK-norm and RoPE on q and k only.  ``record`` is
    given the intermediates ``q_norm``, ``k_norm``, ``q_rope``, ``k_rope`` and ``v`` on the way.
    """
    record = record or no_record
    head_dim = inputs["q_norm_weight"].shape[0]
    inv_rms = inputs["inv_rms"].to(dtype)
    q, k, v = (split_heads(inputs[name].to(dtype) * inv_rms, head_dim)
               for name in ("q_proj", "k_proj", "v_proj"))
    cos, sin = rope_rows(inputs, dtype)
    eps = float(inputs["eps"])
    q = qk_norm(q, inputs["q_norm_weight"].to(dtype), eps)
    k = qk_norm(k, inputs["k_norm_weight"].to(dtype), eps)
    record("q_norm", q)
    record("k_norm", k)
    q, k = rope(q, cos, sin), rope(k, cos, sin)
    record("q_rope", q)
    record("k_rope", k)
    record("v", v)
    return q, k, v


# -- paged attention -------------------------------------------------------------------

def gather_positions(cache: torch.Tensor, block_row: torch.Tensor, count: int,
                     dtype: torch.dtype) -> torch.Tensor:
    """Rows ``[count, Hkv, D]`` of positions ``0..count-1`` of one sequence, in dtype.

    Position ``p`` is at page ``block_row[p // P]``, offset ``p % P``: a physical
    gather, so pages that alias (warmup's ``block_value``) read whatever they hold.
    Only the rows needed are copied, never the whole cache.
    """
    num_pages, page_size = cache.shape[0], cache.shape[1]
    pos = torch.arange(count)
    pages = block_row[pos // page_size].long()
    bad = (pages < 0) | (pages >= num_pages)
    if bool(bad.any()):
        p = int(pos[bad][0])
        raise GoldenInputError(
            f"block_table maps position {p} to page {int(pages[bad][0])}, "
            f"outside the cache's {num_pages} pages")
    return cache[pages, pos % page_size].to(dtype)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
           visible: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax attention of ``q [M, Hq, D]`` over ``k, v [n, Hkv, D]``; returns ``[M, Hq, D]``.

    Query head ``h`` reads KV head ``h // (Hq / Hkv)``.  ``visible [M]`` (optional)
    is how many leading key positions each query sees (the causal mask).
    """
    rows, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    if num_heads % num_kv_heads:
        raise GoldenInputError(f"{num_heads} query heads are not a multiple of {num_kv_heads} KV heads")
    group = num_heads // num_kv_heads
    # query head h is (KV head h // group, member h % group): a view, no copy of k or v per query head
    q = q.reshape(rows, num_kv_heads, group, head_dim)
    scores = torch.einsum("mkgd,nkd->kgmn", q, k) * scale      # [Hkv, group, M, n]
    if visible is not None:
        hidden = torch.arange(k.shape[0])[None, :] >= visible[:, None]   # [M, n]
        scores = scores.masked_fill(hidden, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("kgmn,nkd->mkgd", probs, v).reshape(rows, num_heads, head_dim)


def decode_attention(q: torch.Tensor, k_new: torch.Tensor | None, v_new: torch.Tensor | None,
                     k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                     seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """One query token per batch row over its sequence; returns ``[B, Hq, D]`` in q's dtype.

    With ``k_new``/``v_new`` (``[B, Hkv, D]``), positions ``0..seq_len-2`` come from
    the cache and the current token (position ``seq_len-1``) uses those rows;
    without them every position ``0..seq_len-1`` comes from the cache.
    """
    dtype = q.dtype
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        seq_len = int(seq_lens[b])
        if seq_len < 1:
            raise GoldenInputError(f"seq_lens[{b}] = {seq_len}: a decode row attends to at least one position")
        from_cache = seq_len - 1 if k_new is not None else seq_len
        k = gather_positions(k_cache, block_table[b], from_cache, dtype)
        v = gather_positions(v_cache, block_table[b], from_cache, dtype)
        if k_new is not None:
            k = torch.cat([k, k_new[b:b + 1]])
            v = torch.cat([v, v_new[b:b + 1]])
        out[b] = attend(q[b:b + 1], k, v, scale)[0]
    return out
