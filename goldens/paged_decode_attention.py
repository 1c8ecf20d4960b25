"""Golden of ``paged_decode_attention``: one query token per batch row over a paged cache.

The contract (docs/contracts.md): query head ``h`` reads KV head ``h // (Hq/Hkv)``; softmax of
``scale * q·k`` over positions ``0..seq_len-1`` of sequence ``b``, position ``p``
at page ``block_table[b, p // P]``, offset ``p % P``; ``out = softmax @ v``.

Our readings: the gather is physical, so pages that alias (warmup's
``block_value``) read whatever that row holds; the bf16 query and cache are
upcast to the requested dtype and all math happens there.

Returns ``out [B, Hq, D]``.  The op writes no cache, so no cache rows.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from harness.goldens.common import Record, no_record, decode_attention


def compute(inputs: Mapping[str, Any], dtype: torch.dtype, record: Record | None = None) -> dict[str, torch.Tensor]:
    out = decode_attention(
        inputs["query"].to(dtype), None, None, inputs["k_cache"], inputs["v_cache"],
        inputs["block_table"], inputs["seq_lens"], float(inputs["scale"]),
    )
    (record or no_record)("attn", out)     # the one intermediate: out before its cast
    return {"out": out}
