"""What a wholesale mismatch looks like: a hint, never a verdict (runs in the device worker).

A kernel with a known bug fails every head of every row, and the comparison alone says only
"99% of out bad". The evidence is checked the way the case's own checks compare (the case's
tolerances, the rounding spread, only the rows a check reads). This module looks for what holds
whatever the op computes:

- **another output's golden**: a mismatched output (or written cache rows) agrees with the
  golden of another output of the same shape: ``out holds what query should``;
- **an input passed through**: a mismatched output that agrees with one of the case's inputs of
  the same shape (``y holds input x as passed in``: stored from the wrong buffer);
- **a uniform scale** (asked last, after the pack's finders): a mismatched output whose ratio
  actual / golden is the same, far from 1, in every row (``y is 0.5× the golden in every row``:
  a scale or normalisation factor), judged as the intermediates' table judges one.

Then, for an op of a pack, the pack's own finders (``Pack.hints``, in its order; the first that
names something is the hint): evidence that reads what only its ops have (their caches, their
canaries, their golden recomputed for a known bug; the Qwen3 pack's stray read and RoPE
variants). Each is ``(case, ci, golden, compared, mismatched, golden_dtype) -> str`` ("" or None:
nothing), with ``compared`` this module's ``Compared`` per output and cache and ``agrees``,
``agrees_golden`` and ``passes`` to judge them as the checks would. They are never asked on a
spec op (docs/specs.md), whatever its tensors are called; a spec op's outputs judged by a
``compare:`` comparator, or not floating, are left out (their comparison is not
``ratio_allclose``).

Only ``MISMATCH`` cases are looked at; an audit's mutant run (``AUDIT_MUTANT_VAR``) gets no
hint that costs a golden (a finder checks it). A hint that cannot be computed is no hint: the
case's verdict never depends on this module.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from harness import packs
from harness.case import Case
from harness.goldens import EXACT_SUFFIX
from harness.outcomes import Outcome
from harness.worker.checks import rounding_slack, stored_dtype
from harness.worker.dumps_compare import scale_hint, scale_ratio
from harness.worker.findings import Findings
from harness.worker.case_inputs import CaseInputs
from harness.worker.launch import Launched
from harness.worker.ratio_allclose import ratio_allclose

# An audit's mutant run (its case env names the operator, harness/audit/operators.py): the audit
# reads only its outcomes, so a hint there would cost goldens and say nothing to anyone.
AUDIT_MUTANT_VAR = "HARNESS_MUTANT"


def find_hint(case: Case, ci: CaseInputs, golden: dict[str, torch.Tensor], launched: Launched,
              found: Findings, golden_dtype: torch.dtype) -> str:
    """The hint for a ``MISMATCH`` case, or "" (any other outcome, or nothing the evidence shows)."""
    if found.outcome is not Outcome.MISMATCH:
        return ""
    compared = _compared(case, ci, launched)
    mismatched = [n for n in compared if found.metrics.get("compare", {}).get(n, {}).get("outcome") == "MISMATCH"]
    if not mismatched:
        return ""
    # n failed against its own golden, so agreeing with another's means the two goldens differ
    swaps = [f"{n} holds what {other} should" for n in mismatched for other in compared
             if other != n and _same_kind(compared[n], compared[other]) and agrees(case, n, compared[n], golden, other)]
    if swaps:
        return "; ".join(swaps)
    # n failed against its golden yet equals an input: the kernel stored that input where n belongs
    passed = [f"{n} holds input {name} as passed in" for n in mismatched for name in _inputs_like(ci, compared[n])
              if AUDIT_MUTANT_VAR not in case.env and passes(case, n, compared[n].actual, ci.args[name].to(compared[n].actual.device), None,
                         compared[n].rows)]
    if passed:
        return "; ".join(passed)
    if case.spec is None and packs.find(case.op) is not None:    # a pack's op (a spec op has no pack)
        for path in packs.pack_of(case.op).hints:
            hint = packs.resolve(path)(case, ci, golden, compared, mismatched, golden_dtype)
            if hint:
                return hint
    return "; ".join(h for h in (_scaled(n, compared[n], golden) for n in mismatched) if h)


def _scaled(name: str, c: Compared, golden: dict[str, torch.Tensor]) -> str:
    """``y is 0.5× the golden in every row: ...`` for an output off by one factor everywhere, or ""."""
    if name not in golden or c.actual.dim() == 0:
        return ""
    actual, expected = c.actual, c.rows_of(golden[name].to(c.actual.device))
    if c.rows is not None:                 # only the rows the checks read (padding rows hold anything)
        keep = c.rows.to(actual.device)
        actual, expected = actual[keep], expected[keep]
    return scale_hint(name, scale_ratio(actual, expected)) if actual.numel() else ""


@dataclass(frozen=True)
class Compared:
    """An output, or a cache's written rows, as the checks read it: ``actual`` and how to take
    the matching rows of a golden (``rows_of``), and the row mask for slot-masked outputs."""

    actual: torch.Tensor
    rows_of: Callable[[torch.Tensor], torch.Tensor]
    rows: torch.Tensor | None


def _inputs_like(ci: CaseInputs, c: Compared) -> list[str]:
    """The case's floating input tensors of ``c``'s shape."""
    return [a.name for a in ci.op.by_role("input") if isinstance(ci.args.get(a.name), torch.Tensor)
            and ci.args[a.name].is_floating_point() and ci.args[a.name].shape == c.actual.shape]


def _compared(case: Case, ci: CaseInputs, launched: Launched) -> dict[str, Compared]:
    out = {}
    for arg in ci.op.outputs:
        if case.spec is not None and (arg.name in case.spec.get("compare", {})
                                      or not launched.outputs[arg.name].is_floating_point()):
            continue     # a comparator's or an exact comparison: ratio_allclose is not how it is judged
        rows = ci.valid_rows if arg.name in ci.op.slot_masked_outputs else None
        out[arg.name] = Compared(launched.outputs[arg.name], lambda g: g, rows)
    valid = ci.slots >= 0
    if ci.op.writes_cache and bool(valid.any()):
        for arg in ci.op.caches:
            cache = launched.caches[arg.name]
            layered = cache.dim() == 5
            flat = cache.reshape(cache.shape[0] if layered else 1, -1, *cache.shape[-2:])
            actual = flat[:, ci.slots[valid].to(cache.device)]
            out[arg.name] = Compared(actual, lambda g, layered=layered: (g if layered else g.unsqueeze(0))[:, valid],
                                     None)
    return out


def _same_kind(a: Compared, b: Compared) -> bool:
    return a.actual.shape == b.actual.shape


def agrees(case: Case, name: str, c: Compared, golden: dict[str, torch.Tensor], golden_name: str) -> bool:
    """``c`` within the tolerance of ``name`` of the golden ``golden_name`` (with its rounding spread)."""
    if golden_name not in golden:
        return False
    expected = c.rows_of(golden[golden_name].to(c.actual.device))
    exact = golden.get(golden_name + EXACT_SUFFIX)
    exact = None if exact is None else c.rows_of(exact.to(c.actual.device))
    return passes(case, name, c.actual, expected, exact, c.rows)


def agrees_golden(case: Case, name: str, c: Compared, golden: dict[str, torch.Tensor],
                  variant: dict[str, torch.Tensor]) -> bool:
    """The variant's golden of ``name`` within tolerance of the golden: the variant changes nothing there."""
    device = c.actual.device
    as_stored = c.rows_of(variant[name].to(device)).to(c.actual.dtype)
    exact = golden.get(name + EXACT_SUFFIX)
    return passes(case, name, as_stored, c.rows_of(golden[name].to(device)),
                  None if exact is None else c.rows_of(exact.to(device)), c.rows)


def passes(case: Case, name: str, actual: torch.Tensor, expected: torch.Tensor, exact: torch.Tensor | None,
           rows: torch.Tensor | None) -> bool:
    tol = case.tolerance_for(name)     # the checks' own bound (harness/worker/checks.py), or a hint could disagree
    return ratio_allclose(actual, expected, atol=tol.atol, rtol=tol.rtol, max_error_ratio=tol.max_error_ratio,
                          name=name, rows=rows, slack=rounding_slack(actual, expected, exact, tol),
                          stored=stored_dtype(actual), atol_rms=tol.atol_rms).passed
