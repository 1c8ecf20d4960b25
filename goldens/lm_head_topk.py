"""Golden of ``lm_head_topk`` (the sampling pack; docs/sampling.md): the final RMSNorm, the LM head
and the ``K`` largest logits of each row.

How the golden reads what the contract leaves open:

- the normed state is rounded to the stored dtype of ``hidden`` before the LM head, as a kernel
  that runs the norm and then a bf16 GEMM has it (``rounding=False``: kept in the golden dtype, the
  ``topk_values@exact`` reading; the checker widens each value's bound by the spread of the two);
- ties are ordered by index, the lower first (a stable descending sort); a kernel may order them
  otherwise (the indices are judged by ``topk_pairs``, never element for element).

The indices come back in the golden dtype, as every golden output does (exact up to 2**24).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from harness.goldens.common import Record, no_record
from harness.ops import OPS

ROUNDING_CHANGES = ("topk_values",)


def compute(inputs: Mapping[str, Any], dtype: torch.dtype, record: Record | None = None,
            rounding: bool = True) -> dict[str, torch.Tensor]:
    record = record or no_record
    k = int(OPS["lm_head_topk"].arg("topk_values").shape[-1])
    stored = inputs["hidden"].dtype
    x = inputs["hidden"].to(dtype)
    normed = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + inputs["eps"])
    normed = normed * inputs["final_norm_weight"].to(dtype)
    if rounding:
        normed = normed.to(stored).to(dtype)
    record("normed", normed)
    logits = normed @ inputs["lm_head"].to(dtype).t()
    record("logits", logits)
    values, indices = torch.sort(logits, dim=-1, descending=True, stable=True)
    return {"topk_values": values[:, :k].contiguous(), "topk_indices": indices[:, :k].to(dtype)}
