"""Golden of ``fused_rope_decode_attention``: ``rope_kv_write`` then paged decode attention.

The contract (docs/contracts.md): the prologue of ``rope_kv_write`` (see that golden), then attention in
which the current token (position ``seq_len-1``) uses the k/v just computed.

Our readings of what the contract leaves open:
- Attention consumes the values as the contract stores them: q, k and v are
  rounded to bf16 (the ``query`` output and the cache are bf16), then upcast
  back to the requested dtype.  The returned ``query`` and k/v rows are the
  exact, unrounded values.
  ``compute(..., rounding=False)`` is the other correct reading (no rounding of
  q/k/v before attention); ``goldens.compute(exact=True)`` returns it as
  ``out@exact`` and the checker widens the bound by the spread between the two.
- Positions ``0..seq_len-2`` come from the *pre-launch* cache (a physical
  gather through ``block_table``; aliasing pages read what they held before
  launch), position ``seq_len-1`` from the fresh k/v, whatever the row's slot.
- RoPE uses ``positions`` (the contract has it equal ``seq_len-1``); the
  attended range uses ``seq_lens``.
- ``out`` is computed for every row; the checker ignores rows with slot < 0.

Intermediates (``record``): the prologue's, then ``attn``, which is ``out`` (before any cast).

Returns ``out [B, Hq, D]``, ``query [B, Hq, D]`` and the k/v rows ``[B, Hkv, D]``
each batch row would write (``k_cache``, ``v_cache``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from harness.goldens.common import Record, no_record, decode_attention, rope_kv_rows, stored_if


# Outputs the bf16 rounding of q/k/v before attention changes (``rounding=False``: none).
ROUNDING_CHANGES = ("out",)


def compute(inputs: Mapping[str, Any], dtype: torch.dtype, rounding: bool = True,
            record: Record | None = None) -> dict[str, torch.Tensor]:
    as_stored = stored_if(rounding, inputs["k_cache"].dtype)
    q, k, v = rope_kv_rows(inputs, dtype, record)
    out = decode_attention(
        as_stored(q), as_stored(k), as_stored(v), inputs["k_cache"], inputs["v_cache"],
        inputs["block_table"], inputs["seq_lens"], float(inputs["scale"]),
    )
    (record or no_record)("attn", out)
    return {"out": out, "query": q, "k_cache": k, "v_cache": v}
