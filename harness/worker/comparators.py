"""Per-output comparisons beside ``ratio_allclose`` (runs in the device worker; docs/specs.md).

``exact``: integer and bool outputs, bit for bit, localised along every named dim.  The rest
are the comparators a spec case's ``compare:`` names (``harness/comparators.py`` parses them):
``topk_pairs``, ``argmax``, ``ulp``, ``dequant`` and ``package.module:function``.  Each returns
``Finding``s (MISMATCH, or NEAR_TIE for an argmax flip within the margin) and records
its figures in ``metrics["compare"][name]``.  A user comparator that raises, or returns
something that is not ``(bool, str)``, is a ``SpecError``: the case's ``GOLDEN_ERROR``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from harness import packs
from harness.case import DEFAULT_LOGITS_TOLERANCE, Case, Tolerance
from harness.comparators import Comparator, parse_comparator
from harness.outcomes import Outcome
from harness.worker.findings import Finding
from harness.worker.input_guard import bits
from harness.worker.ratio_allclose import ULP_DTYPES, map_blocks, sum_blocks, half_ulp
from harness.worker.spec_module import SpecError, resolve_callable

_MAX_LISTED = 8


def for_case(case: Case) -> dict[str, Comparator]:
    """Output name -> its comparator: a spec case's ``compare:``, or what its op's pack declares
    (``OpEntry.compare``); empty for an op that declares none."""
    if case.spec is None:
        declared = packs.find(case.op)
        return {name: parse_comparator(text) for name, text in (declared.compare if declared else {}).items()}
    return {name: parse_comparator(text) for name, text in (case.spec.get("compare") or {}).items()}


def where(mask: torch.Tensor, axes) -> str:
    """`` in dim0 [1, 3], dim1 all 4``: the indices of each named dim that hold a flagged element."""
    parts = []
    if mask.dim() == 0:
        return ""
    for dim, axis in enumerate(axes or ()):
        if axis is None or dim >= mask.dim():
            continue
        other = [d for d in range(mask.dim()) if d != dim]
        hit = mask.any(dim=other) if other else mask
        idx = hit.nonzero().flatten().tolist()
        if len(idx) == mask.shape[dim] and len(idx) > 1:
            parts.append(f"{axis} all {len(idx)}")
        else:
            shown = ", ".join(map(str, idx[:_MAX_LISTED])) + (", ..." if len(idx) > _MAX_LISTED else "")
            parts.append(f"{axis} [{shown}]")
    return " in " + ", ".join(parts) if parts else ""


def bad_map(mask: torch.Tensor, axes) -> dict[str, Any] | None:
    """The HTML heatmap's ``map`` of a bad-element mask (``ratio_allclose``'s layout: ``axes``,
    ``size``, ``block``, ``shape``, ``ratio``): the bad share per cell over the output's first two
    dims (a 1-D output: its one dim down, one column), the other dims summed into each cell.
    None when nothing is bad."""
    if mask.dim() == 0 or not bool(mask.any()):
        return None
    m = mask.reshape(-1, 1, 1) if mask.dim() == 1 else mask.reshape(mask.shape[0], mask.shape[1], -1)
    n0, n1, rest = m.shape
    (b0, r0), (b1, c1) = map_blocks(n0), map_blocks(n1)

    def cells(x: torch.Tensor) -> torch.Tensor:        # (n0, n1) -> (r0, c1) block sums
        return sum_blocks(sum_blocks(x, b1).transpose(0, 1), b0).transpose(0, 1)
    bad = cells(m.sum(-1, dtype=torch.float64))
    compared = cells(torch.ones(n0, n1, dtype=torch.float64)) * rest
    names = list(axes or ())
    name = lambda d: names[d] if d < len(names) and names[d] else f"dim{d}"   # noqa: E731
    return {"axes": [name(0), name(1) if mask.dim() > 1 else ""], "size": [n0, n1], "block": [b0, b1],
            "shape": [r0, c1], "ratio": (bad / compared).cpu().tolist()}


def _counted(metrics: dict, name: str, actual: torch.Tensor, bad: torch.Tensor, axes, *,
             comparator: str | None = None, **extra) -> int:
    """An element-wise verdict recorded (``metrics["compare"][name]`` and its heat map): the number
    of bad elements.  ``extra``: what the comparator adds to its metrics."""
    n = int(bad.sum())
    metrics["compare"][name] = {**({"comparator": comparator} if comparator else {}),
                                "outcome": "MISMATCH" if n else "PASS", "numel": actual.numel(), "bad_count": n,
                                **extra}
    _judged(metrics, name, bad, axes)
    return n


def _judged(metrics: dict, name: str, bad: torch.Tensor | None, axes) -> dict:
    """``metrics["compare"][name]``'s common fields: ``passed`` and, when elements are bad, the
    heatmap ``map`` (docs/reports.md); ``bad`` a mask over the output's dims (or None)."""
    entry = metrics["compare"][name]
    entry["passed"] = entry.get("outcome") == "PASS"
    if bad is not None and bad.numel():
        entry["bad_ratio"] = float(bad.sum()) / bad.numel()      # the table's "(q_out 12.5% bad)"
    found = bad_map(bad.cpu(), axes) if bad is not None else None
    if found is not None:
        entry["map"] = found
    return entry


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in mask.nonzero()[0]) if mask.dim() else ()


def exact(name: str, actual: torch.Tensor, expected: torch.Tensor, axes, compared: torch.Tensor,
          metrics: dict) -> list:
    """Integer and bool outputs: every compared element bit for bit (bool as its byte)."""
    expected = expected.to(actual.device)
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        raise SpecError(f"golden output {name} is {expected.dtype} {tuple(expected.shape)}, the spec says "
                        f"{actual.dtype} {tuple(actual.shape)}")
    bad = (bits(actual) != bits(expected)) & compared
    n = _counted(metrics, name, actual, bad, axes, comparator="exact")
    if not n:
        return []
    i = _first(bad)
    a, e = actual[i].item(), expected[i].item()
    return [Finding(Outcome.MISMATCH, f"{name}: {n} / {actual.numel()} elements differ (exact, {_dt(actual)})"
                    f"{where(bad, axes)}; first at {list(i)}: {a!r}, golden {e!r}")]


def _dt(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


@dataclass
class Context:
    """What a comparator may read: the case, its inputs, every actual and golden output."""

    case: Case
    ci: Any
    launched: Any
    goldens: dict[str, torch.Tensor]
    comparator: Comparator

    def tensor(self, name: str, golden: bool) -> torch.Tensor:
        """``name``'s golden (or actual) output, or the input of that name."""
        if name in self.launched.outputs:
            return self.goldens[name] if golden else self.launched.outputs[name]
        value = self.ci.args.get(name)
        if not isinstance(value, torch.Tensor):
            raise SpecError(f"comparator {self.comparator.kind}({name}): the spec has no tensor {name!r}")
        return value

    def run(self, name: str, actual: torch.Tensor, expected: torch.Tensor, axes, tol: Tolerance,
            metrics: dict) -> list:
        kind = self.comparator.kind
        expected = expected.to(actual.device)
        found = _RUNS[kind](self, name, actual, expected, axes, tol, metrics)
        metrics["compare"].setdefault(name, {})["comparator"] = (
            self.comparator.arg if kind == "function" else f"{kind}({self.comparator.arg})")
        return found


def _topk_pairs(ctx: Context, name, actual, expected, axes, tol, metrics) -> list:
    """Indices judged by the values paired with them, row by row (every dim but the last is a row):
    an index the golden also picked must carry the golden's value for it; an index the golden did
    not pick is a tie only when its value equals the golden's k-th (smallest kept) value; the same
    index twice in a row is wrong."""
    values_name = ctx.comparator.arg
    a_val = ctx.tensor(values_name, golden=False).to(actual.device)
    g_val = ctx.tensor(values_name, golden=True).to(actual.device)
    if a_val.shape != actual.shape:
        raise SpecError(f"topk_pairs({values_name}): {values_name} has shape {tuple(a_val.shape)}, "
                        f"{name} {tuple(actual.shape)}: they must pair element for element")
    k = actual.shape[-1] if actual.dim() else 1
    ai, gi = actual.reshape(-1, k).long(), expected.reshape(-1, k).long()
    av, gv = a_val.reshape(-1, k).double(), g_val.reshape(-1, k).double()
    close = lambda x, g: (x - g).abs() <= tol.atol + tol.rtol * g.abs()   # noqa: E731
    rows = ai.shape[0]
    bad_rows = torch.zeros(rows, dtype=torch.bool, device=actual.device)
    reasons: dict[int, str] = {}
    threshold = gv.min(dim=-1).values
    for r in range(rows):
        seen: set[int] = set()
        golden_of = {int(i): float(v) for i, v in zip(gi[r].tolist(), gv[r].tolist())}
        for j in range(k):
            idx, val = int(ai[r, j]), av[r, j]
            if idx in seen:
                reasons.setdefault(r, f"index {idx} twice")
            seen.add(idx)
            if idx in golden_of:
                if not bool(close(val, torch.tensor(golden_of[idx], dtype=torch.float64))):
                    reasons.setdefault(r, f"index {idx} carries {float(val):.6g}, golden {golden_of[idx]:.6g}")
            elif not bool(close(val, threshold[r])):
                reasons.setdefault(r, f"index {idx} (value {float(val):.6g}) is not in the golden's top {k} "
                                      f"and does not tie its k-th value {float(threshold[r]):.6g}")
        if r in reasons:
            bad_rows[r] = True
    n = int(bad_rows.sum())
    metrics["compare"][name] = {"outcome": "MISMATCH" if n else "PASS", "rows": rows, "bad_rows": n}
    lead = actual.shape[:-1] if actual.dim() > 1 else (rows,)
    mask = bad_rows.reshape(lead) if actual.dim() > 1 else bad_rows
    _judged(metrics, name, mask, (axes or ())[:-1] if actual.dim() > 1 else axes)    # rows: every dim but k
    if not n:
        return []
    first = int(bad_rows.nonzero()[0])
    return [Finding(Outcome.MISMATCH, f"{name}: {n} / {rows} rows pick indices their paired {values_name} do not "
                    f"justify{where(mask, (axes or ())[:-1] if actual.dim() > 1 else axes)}; row {first}: "
                    f"{reasons[first]}")]


def _argmax(ctx: Context, name, actual, expected, axes, tol, metrics) -> list:
    """Each index against the golden's; a differing pick whose golden logit is within the near-tie
    margin of the golden pick's is NEAR_TIE (``DEFAULT_LOGITS_TOLERANCE.argmax_margin``, or the
    case's ``argmax_margin``)."""
    logits = ctx.tensor(ctx.comparator.arg, golden=True).to(actual.device).double()
    margin = tol.argmax_margin if tol.argmax_margin is not None else DEFAULT_LOGITS_TOLERANCE.argmax_margin
    a = actual.reshape(-1).long()
    e = expected.reshape(-1).long()
    flat = logits.reshape(a.numel(), -1)
    V = flat.shape[1]
    invalid = (a < 0) | (a >= V)
    rows = torch.arange(a.numel(), device=a.device)
    gap = flat[rows, e] - flat[rows, a.clamp(0, V - 1)]
    flipped = a != e
    hard = flipped & (invalid | (gap > margin))
    ties = flipped & ~hard
    shape = actual.shape
    metrics["compare"][name] = {"outcome": "MISMATCH" if bool(hard.any()) else "NEAR_TIE" if bool(ties.any())
                                else "PASS", "rows": a.numel(), "flips": int(hard.sum()), "near_ties": int(ties.sum())}
    _judged(metrics, name, (hard | ties).reshape(shape), axes)
    found = []
    for mask, outcome, what in ((hard, Outcome.MISMATCH, "beyond"), (ties, Outcome.NEAR_TIE, "within")):
        n = int(mask.sum())
        if n:
            r = int(mask.nonzero()[0])
            found.append(Finding(outcome, f"{name}: argmax differs in {n} rows {what} the near-tie margin {margin:g}"
                                 f"{where(mask.reshape(shape), axes)}: row {r} picked {int(a[r])}, golden {int(e[r])} "
                                 f"(golden gap {float(gap[r]):.4g})"))
    return found


def _ulp(ctx: Context, name, actual, expected, axes, tol, metrics) -> list:
    """Floating: |actual - golden| within N ulps of the stored dtype at the golden's value."""
    n_ulps = int(ctx.comparator.arg)
    if not actual.is_floating_point():
        raise SpecError(f"ulp({n_ulps}) applies to a floating output; {name} is {_dt(actual)}")
    e = expected.float() if actual.dtype != torch.float64 else expected.double()
    a = actual.to(e.dtype)
    if actual.dtype in ULP_DTYPES:
        ulp = 2 * half_ulp(e.abs(), actual.dtype)
    else:
        ulp = (torch.nextafter(e.abs(), torch.full_like(e, float("inf"))) - e.abs())
    diff = (a - e).abs()
    bad = ~(diff <= n_ulps * ulp) & torch.isfinite(e)
    n = _counted(metrics, name, actual, bad, axes, ulps=n_ulps)
    if not n:
        return []
    i = _first(bad)
    return [Finding(Outcome.MISMATCH, f"{name}: {n} / {actual.numel()} elements beyond {n_ulps} ulp of "
                    f"{_dt(actual)}{where(bad, axes)}; first at {list(i)}: {float(a[i]):.6g}, golden {float(e[i]):.6g} "
                    f"({float(diff[i] / ulp[i]):.3g} ulp)")]


def _dequant(ctx: Context, name, actual, expected, axes, tol, metrics) -> list:
    """Integer codes with their scales (another output, or an input; broadcast against the codes):
    each code may differ from the golden's by one (a value at a rounding boundary rounds either
    way); beyond that, or when the dequantised values differ by more than one golden scale step
    plus the case's atol/rtol, the element is bad."""
    scales_name = ctx.comparator.arg
    a_s = ctx.tensor(scales_name, golden=False).to(actual.device).double()
    g_s = ctx.tensor(scales_name, golden=True).to(actual.device).double()
    try:
        a_deq = actual.double() * a_s
        g_deq = expected.double() * g_s
        step = g_s.abs().expand_as(g_deq)
    except RuntimeError as exc:
        raise SpecError(f"dequant({scales_name}): {scales_name} {tuple(a_s.shape)} does not broadcast against "
                        f"{name} {tuple(actual.shape)}") from exc
    codes = (actual.long() - expected.long()).abs()
    bound = step + tol.atol + tol.rtol * g_deq.abs()
    bad = (codes > 1) | ((a_deq - g_deq).abs() > bound)
    n = _counted(metrics, name, actual, bad, axes, off_by_one_codes=int((codes == 1).sum()))
    if not n:
        return []
    i = _first(bad)
    return [Finding(Outcome.MISMATCH, f"{name}: {n} / {actual.numel()} codes beyond one code of the golden after "
                    f"dequantisation by {scales_name}{where(bad, axes)}; first at {list(i)}: code {int(actual[i])} "
                    f"({float(a_deq[i]):.6g}), golden {int(expected[i])} ({float(g_deq[i]):.6g})")]


def _function(ctx: Context, name, actual, expected, axes, tol, metrics) -> list:
    """A user comparator, called as the library calls it; its message becomes the finding's."""
    text = ctx.comparator.arg
    fn = resolve_callable(text, f"comparator for {name}")
    inputs = {k: v for k, v in ctx.ci.args.items()}
    try:
        ret = fn(actual, expected, actual_outputs=dict(ctx.launched.outputs),
                 expected_outputs={k: v.to(actual.device) for k, v in ctx.goldens.items()},
                 inputs=inputs, rtol=tol.rtol, atol=tol.atol)
    except Exception as exc:
        raise SpecError(f"comparator {text} for {name} raised {type(exc).__name__}: {exc}") from exc
    if not (isinstance(ret, (tuple, list)) and len(ret) == 2):
        raise SpecError(f"comparator {text} for {name} returned {type(ret).__name__}, not (bool, str)")
    ok, message = bool(ret[0]), str(ret[1])
    metrics["compare"][name] = {"outcome": "PASS" if ok else "MISMATCH", "message": message}
    _judged(metrics, name, None, axes)       # a verdict without elements: no map
    return [] if ok else [Finding(Outcome.MISMATCH, f"{name}: {message}")]


_RUNS = {"topk_pairs": _topk_pairs, "argmax": _argmax, "ulp": _ulp, "dequant": _dequant, "function": _function}

__all__ = ["Context", "bad_map", "exact", "for_case", "where"]
