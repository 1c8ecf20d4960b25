"""The Qwen3 pack's memory plan (docs/cases.md, "Memory plan"): ``Pack.memory_plan``.

Its inputs, caches, outputs, guard bands, generation and checks are what the core reads from
any op's contract (``harness.memory_plan.contract_plan``); what only this pack knows is its
goldens' share: the results they hold (the k/v rows written, not the whole cache, and the
``@exact`` twins of the ops that return them) and their peak working set.  Torch-free.
"""
from __future__ import annotations

import dataclasses
import math

from harness.case import Case
from harness.memory_plan import MemoryPlan, contract_plan, golden_bytes, rows_bound
from harness.ops import OPS, OpSpec, resolve_shape

# The goldens' block sizes (goldens/common.py QUERY_BLOCK, goldens/decode_layers.py LM_HEAD_ROWS),
# restated here because the goldens import torch; a unit test holds them equal.
GOLDEN_QUERY_BLOCK = 256
GOLDEN_LM_HEAD_ROWS = 16384
# Ops whose golden also returns the ``@exact`` reading (goldens' ROUNDING_CHANGES).
_EXACT_TWIN = {"fused_rope_decode_attention", "prefill_attention", "decode_layers"}


def plan(case: Case, golden_dtype: str = "fp32") -> MemoryPlan:
    """The memory plan of a case of one of this pack's ops, its golden in ``golden_dtype``."""
    op = OPS[case.op]
    sizes = case.sizes(rows_bound(case))
    g = golden_bytes(golden_dtype)
    return dataclasses.replace(contract_plan(case, golden_dtype), golden=_golden_results(case, op, sizes, g),
                               golden_working=_golden_working(case, sizes, g))


def _golden_results(case: Case, op: OpSpec, s: dict[str, int], g: int) -> int:
    """Every output in the golden dtype, the k/v rows the op writes, the ``@exact`` twins, and
    the copy the golden cache keeps in memory."""
    results = sum(math.prod(resolve_shape(a.shape, s)) for a in op.outputs) * g
    if op.writes_cache:
        written = s["L"] * s["B"] if case.op == "decode_layers" else rows_bound(case)
        results += 2 * written * s["Hkv"] * s["D"] * g
    if case.op in _EXACT_TWIN:
        results *= 2
    return 2 * results


def _golden_working(case: Case, s: dict[str, int], g: int) -> int:
    """The golden's peak temporaries (goldens/), ``g`` bytes per element.

    The prologue holds q, k, v and their normed and rotated forms (prefill: one sequence's
    chunk at a time); attention gathers one sequence's keys and values (bf16, upcast, joined
    with the fresh row) and holds two score matrices at once (each step makes the next);
    ``decode_layers`` upcasts every layer weight once, the LM head a block of rows at a time,
    and holds the MLP's activations.
    """
    Hq, Hkv, D, B = s["Hq"], s["Hkv"], s["D"], s["B"]
    heads = Hq + 2 * Hkv
    rows = rows_bound(case) // B if case.op == "prefill_attention" else B
    context = case.max_pos
    queries = min(GOLDEN_QUERY_BLOCK, rows) if case.op == "prefill_attention" else 1
    working = (rows * (3 * heads * D + 2 * D) * g
               + 2 * context * Hkv * D * (2 + 2 * g)
               + queries * context * (2 * Hq * g + 1))
    if case.op == "decode_layers":
        H, inter, V = s["H"], s["I"], s["V"]
        weights = (H * heads * D + Hq * D * H + 3 * H * inter + 5 * H) * g
        lm_head = min(V, GOLDEN_LM_HEAD_ROWS) * H * g + 2 * B * V * g
        working += weights + lm_head + B * (3 * inter + 4 * H) * g
    return working
