"""Golden of ``rope_kv_write``: the decode prologue (QK-norm, NeoX RoPE, cache write).

The contract (docs/contracts.md): ``x = proj * inv_rms`` for q, k and v; QK-norm per head on q and k
(not v): ``x * rsqrt(mean(x²) + eps) * w`` with the mean over head_dim; NeoX
rotate-half RoPE at ``positions`` with the given ``rope_cos``/``rope_sin`` rows
(``x*cos + rotate_half(x)*sin``, ``rotate_half(x) = [-x₂, x₁]``).

Returns, exact in the requested dtype (not rounded to bf16; the checker's
tolerance covers the kernel's bf16 store):
  ``query``    ``[B, Hq, D]``
  ``k_cache``, ``v_cache``  ``[B, Hkv, D]``: the row each batch row would write,
               whatever its slot (the checker keeps rows with slot >= 0).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from harness.goldens.common import Record, rope_kv_rows


def compute(inputs: Mapping[str, Any], dtype: torch.dtype, record: Record | None = None) -> dict[str, torch.Tensor]:
    q, k, v = rope_kv_rows(inputs, dtype, record)
    return {"query": q, "k_cache": k, "v_cache": v}
