"""Golden of ``prefill_attention``: chunked prefill with cache writes.

The contract (docs/contracts.md): the prologue of ``rope_kv_write`` on every packed token (see that
golden); the tokens of sequence ``b`` are ``cu_seqlens[b] .. cu_seqlens[b+1]-1``
at positions ``context_lens[b] + i``; each attends to the ``context_lens[b]``
cached positions and causally to the chunk's own tokens, using their fresh k/v
whatever their slot.

Our readings:
- As in the fused decode op, attention consumes q, k and v rounded to bf16 (the
  values the contract stores), upcast back to the requested dtype; the returned
  k/v rows are exact.
  ``compute(..., rounding=False)`` is the other correct reading (no rounding of
  q/k/v before attention); ``goldens.compute(exact=True)`` returns it as
  ``out@exact`` and the checker widens the bound by the spread between the two.
- The cached positions ``0..context_lens[b]-1`` are a physical gather from the
  pre-launch cache through ``block_table[b]``.
- RoPE uses ``positions`` as given; the causal mask uses each token's index in
  its chunk (the contract makes the two agree).
- Queries are attended in blocks of ``QUERY_BLOCK`` rows to bound memory, each
  block against the keys its last token can see; the result does not depend
  on the block size (masked keys get weight exactly 0).  The prologue runs one
  sequence at a time, so only one sequence's q is held at once.

Intermediates (``record``): the prologue's for every token, then ``attn`` (``out``, before any cast).

Returns ``out [T, Hq, D]`` and the k/v rows ``[T, Hkv, D]`` each token would
write (``k_cache``, ``v_cache``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from harness.goldens.common import (
    QUERY_BLOCK, GoldenInputError, Record, attend, gather_positions, rope_kv_rows, stored_if,
)
from harness.intermediates.spec import intermediates


# Inputs with one row per packed token: sliced per sequence.
TOKEN_INPUTS = ("q_proj", "k_proj", "v_proj", "inv_rms", "positions")


# Outputs the bf16 rounding of q/k/v before attention changes (``rounding=False``: none).
ROUNDING_CHANGES = ("out",)


def compute(inputs: Mapping[str, Any], dtype: torch.dtype, rounding: bool = True,
            record: Record | None = None) -> dict[str, torch.Tensor]:
    as_stored = stored_if(rounding, inputs["k_cache"].dtype)
    cu_seqlens, context_lens = inputs["cu_seqlens"].tolist(), inputs["context_lens"].tolist()
    block_table, scale = inputs["block_table"], float(inputs["scale"])
    tokens, head_dim = inputs["q_proj"].shape[0], inputs["q_norm_weight"].shape[0]
    num_heads, num_kv_heads = inputs["q_proj"].shape[1] // head_dim, inputs["k_proj"].shape[1] // head_dim
    _check_packing(cu_seqlens, context_lens, tokens)

    out = torch.empty(tokens, num_heads, head_dim, dtype=dtype)
    k_rows = torch.empty(tokens, num_kv_heads, head_dim, dtype=dtype)
    v_rows = torch.empty_like(k_rows)
    # the prologue's intermediates, filled a sequence at a time (only when recorded)
    parts = {} if record is None else {
        i.name: torch.empty(tokens, num_heads if "Hq" in i.shape else num_kv_heads, head_dim, dtype=dtype)
        for i in intermediates("rope_kv_write")}
    for b, context in enumerate(context_lens):
        first, end = cu_seqlens[b], cu_seqlens[b + 1]
        # the prologue one sequence at a time, so only one sequence's q is ever held
        chunk = dict(inputs, **{name: inputs[name][first:end] for name in TOKEN_INPUTS})
        q, k_rows[first:end], v_rows[first:end] = rope_kv_rows(
            chunk, dtype, None if record is None else lambda name, t: parts[name][first:end].copy_(t))
        q = as_stored(q)
        keys = torch.cat([gather_positions(inputs["k_cache"], block_table[b], context, dtype),
                          as_stored(k_rows[first:end])])
        values = torch.cat([gather_positions(inputs["v_cache"], block_table[b], context, dtype),
                            as_stored(v_rows[first:end])])
        for start in range(0, end - first, QUERY_BLOCK):
            stop = min(start + QUERY_BLOCK, end - first)
            # chunk token i sees the context and chunk tokens 0..i; no token of the block sees past `seen`
            visible = context + torch.arange(start, stop) + 1
            seen = context + stop
            out[first + start:first + stop] = attend(q[start:stop], keys[:seen], values[:seen], scale, visible)
    if record is not None:
        for name, t in parts.items():
            record(name, t)
        record("attn", out)
    return {"out": out, "k_cache": k_rows, "v_cache": v_rows}


def _check_packing(cu_seqlens: list[int], context_lens: list[int], tokens: int) -> None:
    """Every packed token belongs to exactly one sequence, in order."""
    ok = (len(cu_seqlens) == len(context_lens) + 1 and cu_seqlens[0] == 0 and cu_seqlens[-1] == tokens
          and all(a <= b for a, b in zip(cu_seqlens, cu_seqlens[1:])))
    if not ok:
        raise GoldenInputError(
            f"cu_seqlens {cu_seqlens} does not pack {tokens} tokens into {len(context_lens)} sequences")
