"""Golden of ``prefill_attention``: chunked prefill with cache writes.

DESIGN §4: the prologue of ``rope_kv_write`` on every packed token (see that
golden); the tokens of sequence ``b`` are ``cu_seqlens[b] .. cu_seqlens[b+1]-1``
at positions ``context_lens[b] + i``; each attends to the ``context_lens[b]``
cached positions and causally to the chunk's own tokens, using their fresh k/v
whatever their slot.

Our readings:
- As in the fused decode op, attention consumes q, k and v rounded to bf16 (the
  values the contract stores), upcast back to the requested dtype; the returned
  k/v rows are exact.
- The cached positions ``0..context_lens[b]-1`` are a physical gather from the
  pre-launch cache through ``block_table[b]``.
- RoPE uses ``positions`` as given; the causal mask uses each token's index in
  its chunk (the contract makes the two agree).
- Queries are attended in blocks of ``QUERY_BLOCK`` rows to bound memory; the
  result does not depend on the block size.

Returns ``out [T, Hq, D]`` and the k/v rows ``[T, Hkv, D]`` each token would
write (``k_cache``, ``v_cache``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from goldens.common import QUERY_BLOCK, GoldenInputError, as_stored, attend, gather_positions, rope_kv_rows


def compute(inputs: Mapping[str, Any], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    q, k, v = rope_kv_rows(inputs, dtype)
    q_att, k_att, v_att = as_stored(q), as_stored(k), as_stored(v)
    cu_seqlens, context_lens = inputs["cu_seqlens"].tolist(), inputs["context_lens"].tolist()
    block_table, scale = inputs["block_table"], float(inputs["scale"])
    _check_packing(cu_seqlens, context_lens, tokens=q.shape[0])

    out = torch.empty_like(q)
    for b, context in enumerate(context_lens):
        first, end = cu_seqlens[b], cu_seqlens[b + 1]
        keys = torch.cat([gather_positions(inputs["k_cache"], block_table[b], context, dtype), k_att[first:end]])
        values = torch.cat([gather_positions(inputs["v_cache"], block_table[b], context, dtype), v_att[first:end]])
        for start in range(first, end, QUERY_BLOCK):
            stop = min(start + QUERY_BLOCK, end)
            # token i of the chunk sees the context and chunk tokens 0..i
            visible = context + torch.arange(start - first, stop - first) + 1
            out[start:stop] = attend(q_att[start:stop], keys, values, scale, visible)
    return {"out": out, "k_cache": k, "v_cache": v}


def _check_packing(cu_seqlens: list[int], context_lens: list[int], tokens: int) -> None:
    """Every packed token belongs to exactly one sequence, in order."""
    ok = (len(cu_seqlens) == len(context_lens) + 1 and cu_seqlens[0] == 0 and cu_seqlens[-1] == tokens
          and all(a <= b for a, b in zip(cu_seqlens, cu_seqlens[1:])))
    if not ok:
        raise GoldenInputError(
            f"cu_seqlens {cu_seqlens} does not pack {tokens} tokens into {len(context_lens)} sequences")
