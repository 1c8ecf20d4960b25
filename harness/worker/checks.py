"""Every check in docs/contracts.md for one launched case (runs in the device worker).

Each check yields findings; the case's outcome is the most specific finding
(``outcomes.CHECK_PRECEDENCE``): a guard band touched explains a mismatch, a
poisoned element explains a NaN.  All findings are kept in the report so an
engineer sees the whole picture, first cause first.

The checks run on the device that holds the outputs: the goldens (a few MB) go to it, the
outputs and caches (up to many GB) stay there, and only what the report prints comes back
to the host: counts, per-axis ratios, the listed indices and values.  The slot mapping and
the row masks are host tensors; they move to the device where a device tensor meets them.
"""
from __future__ import annotations

from typing import Any

import torch

from harness import packs
from harness.case import Case, Tolerance
from harness.goldens import EXACT_SUFFIX
from harness.worker.input_guard import InputWrite, bits
from harness.worker import comparators
from harness.worker.findings import Finding, Findings
from harness.worker.ratio_allclose import ULP_DTYPES, Comparison, half_ulp, ratio_allclose, summarise_localisation
from harness.worker.case_inputs import CaseInputs
from harness.worker.launch import Launched, poison_mask
from harness.outcomes import CHECK_PRECEDENCE, Outcome

_MAX_LISTED = 8

# How the rounding spread |golden@exact - golden| enters the comparison (docs/contracts.md,
# "Rounding spread"); the alternatives stay for bench/bench_false_alarms.py --rule:
#   widen     bad when |a - g| > atol + rtol*|g| + |g_exact - g|   (the rule)
#   current   the spread is ignored (the check before the rule)
#   either    an element is good when it is within tolerance of g or of g_exact
#   interval  the bound is widened by the spread only on g_exact's side of g
ACCEPT_RULE = "widen"
ACCEPT_RULES = ("widen", "current", "either", "interval")


def run_checks(case: Case, ci: CaseInputs, goldens: dict[str, torch.Tensor], launched: Launched) -> Findings:
    """``ci`` and ``launched`` on the kernel's device; ``goldens`` anywhere (moved to that device)."""
    device = next(iter(launched.outputs.values())).device
    goldens = {name: g.to(device) for name, g in goldens.items()}
    findings: list[Finding] = []
    metrics: dict[str, Any] = {"compare": {}}
    findings += _guard_findings(ci, launched)
    if launched.returned:
        findings.append(Finding(Outcome.CONTRACT, f"return value: {launched.returned}"))
    findings += [_input_finding(ci, w) for w in launched.inputs_written]
    judges = comparators.for_case(case)
    for arg in ci.op.outputs:
        rows = ci.valid_rows if arg.name in ci.op.slot_masked_outputs else None
        judge = judges.get(arg.name)
        findings += _output_findings(case, ci, arg.name, arg.axes, launched.outputs[arg.name],
                                     goldens[arg.name], rows, metrics, exact=goldens.get(arg.name + EXACT_SUFFIX),
                                     judge=judge and comparators.Context(case, ci, launched, goldens, judge),
                                     poison=launched.poison.get(arg.name))
    findings += _pack_findings(case, ci, launched, goldens, metrics)
    for arg in ci.op.caches:
        findings += _cache_findings(case, ci, arg.name, ci.args[arg.name], launched.caches[arg.name],
                                    goldens.get(arg.name), metrics, exact=goldens.get(arg.name + EXACT_SUFFIX))
    findings.sort(key=lambda f: CHECK_PRECEDENCE.index(f.outcome))
    outcome = findings[0].outcome if findings else Outcome.PASS
    return Findings(outcome, tuple(findings), metrics)


def _pack_findings(case: Case, ci: CaseInputs, launched: Launched, goldens: dict[str, torch.Tensor],
                   metrics: dict) -> list[Finding]:
    """What the op's pack checks of its own (``OpEntry.checks``), in the order it declares them."""
    if case.spec is not None:
        return []
    declared = packs.find(case.op)
    found: list[Finding] = []
    for path in declared.checks if declared is not None else ():
        found += list(packs.resolve(path)(case, ci, launched, goldens, metrics))
    return found


# -- the rounding spread ---------------------------------------------------------

def rounding_slack(actual: torch.Tensor, expected: torch.Tensor, exact: torch.Tensor | None, tol: Tolerance,
                   rule: str | None = None) -> torch.Tensor | None:
    """Per-element allowance added to ``atol + rtol*|g|`` (``ratio_allclose(slack=)``), or None.

    ``expected`` is the golden as the contract stores attention's inputs (q/k/v rounded
    to bf16), ``exact`` the same golden without that rounding; both legitimate readings.
    """
    rule = rule or ACCEPT_RULE
    if rule not in ACCEPT_RULES:
        raise ValueError(f"unknown acceptance rule {rule!r} (expected one of {', '.join(ACCEPT_RULES)})")
    if exact is None or rule == "current":
        return None
    dtype = torch.promote_types(expected.dtype, torch.float32)
    g, x = expected.to(dtype), exact.to(device=expected.device, dtype=dtype)
    spread = (x - g).abs()
    if rule == "widen":
        return spread
    a = actual.to(device=expected.device, dtype=dtype)
    if rule == "either":       # within tolerance of g_exact: allow exactly what it is off g
        near_exact = (a - x).abs() <= tol.atol + tol.rtol * x.abs()
        return torch.where(near_exact, (a - g).abs(), torch.zeros_like(g)).nan_to_num(0.0)
    toward_exact = torch.sign(a - g) == torch.sign(x - g)     # interval [g, g_exact]
    return torch.where(toward_exact, spread, torch.zeros_like(g))


def stored_dtype(actual: torch.Tensor) -> torch.dtype | None:
    """The low-precision dtype an output or cache row was stored in: its bound is at least half an
    ulp of it plus atol (docs/contracts.md, "Tolerances and the rounding of the stored value");
    None for fp32."""
    return actual.dtype if actual.dtype in ULP_DTYPES else None


# -- guard bands ----------------------------------------------------------------

def _guard_findings(ci: CaseInputs, launched: Launched) -> list[Finding]:
    findings = []
    for name, (before, after) in launched.guard_damage.items():
        if not before and not after:
            continue
        if ci.op.writes_cache and name in {a.name for a in ci.op.caches}:      # a cache the op writes: name the rows that did it
            where = "; ".join(_cache_guard_damage(ci, name, before + after))
        else:
            parts = []
            if before:
                parts.append(f"{len(before)} elements before the start (offsets {_span(before)})")
            if after:
                parts.append(f"{len(after)} elements past the end (offsets {_span(after)})")
            where = " and ".join(parts)
        findings.append(Finding(Outcome.OOB_WRITE, f"{name}: guard band overwritten: {where}"))
    return findings


def _cache_guard_damage(ci: CaseInputs, name: str, offsets: list[int]) -> list[str]:
    """Each overwritten guard offset attributed to the rows whose slot puts their cache row there.

    A row with slot ``s`` written with raw offsets covers elements ``s*row .. s*row+row-1`` of
    the cache (layer 0's base for a per-layer cache), so ``s = -1`` is the row just before it.
    """
    cache = ci.args[name]
    row = cache.shape[-2] * cache.shape[-1]
    writers: dict[int, list[int]] = {}
    for r, s in enumerate(ci.slots.tolist()):
        if s < 0:
            writers.setdefault(s, []).append(r)
    by_slot: dict[int, list[int]] = {}
    stray: list[int] = []
    for o in offsets:
        (by_slot.setdefault(o // row, []) if o // row in writers else stray).append(o)
    declared = packs.find(ci.op.name)           # a spec op has no pack: its rows are rows
    noun = declared.row_noun if declared else "row"
    where = []
    for s in sorted(by_slot):
        rows = writers[s]
        shown = ", ".join(map(str, rows[:_MAX_LISTED]))
        whose = f"slot {s}" if len(rows) <= _MAX_LISTED else f"{len(rows)} {noun}s with slot {s}"
        shown += ", ..." if len(rows) > _MAX_LISTED else ""
        where.append(f"{noun}{'s' if len(rows) > 1 else ''} {shown} ({whose}): {_side(by_slot[s], name)}")
    if stray:
        where.append(f"{_side(stray, name)}, not attributable to a {noun}")
    return where


def _side(offsets: list[int], name: str) -> str:
    """``64 elements before the start of <cache> (offsets -64..-1)``, for either band or both."""
    before = [o for o in offsets if o < 0]
    after = offsets[len(before):]
    parts = [f"{len(before)} elements before the start of {name} (offsets {_span(before)})"] if before else []
    if after:
        parts.append(f"{len(after)} elements after the end of {name} (offsets {_span(after)})")
    return " and ".join(parts)


def _span(offsets: list[int]) -> str:
    return f"{offsets[0]}..{offsets[-1]}" if len(offsets) > 1 else str(offsets[0])


# -- read-only inputs -------------------------------------------------------------

# What an input's dimension indexes, by its shape symbol (harness/ops/__init__.py); ``X*D`` columns are
# heads of D.  Other dims (D, H, ...) are not localised.
_INPUT_AXES = {"B": "batch", "T": "token", "max_pos": "position", "MB": "block", "Hq*D": "head",
               "Hkv*D": "kv_head"}


def _input_finding(ci: CaseInputs, write: InputWrite) -> Finding:
    """``the kernel wrote into input q_proj: 4096 of 4096 elements changed in batch all 4, ...``"""
    changed, axes = write.changed, []
    shape = []
    arg = ci.op.arg(write.name)
    for i, (sym, n) in enumerate(zip(arg.shape, changed.shape)):
        axis = arg.axes[i] if arg.axes else _INPUT_AXES.get(sym)
        if sym.endswith("*D") and axis:          # split columns h*D + d into (head, dim)
            D = ci.sizes["D"]
            shape += [n // D, D]
            axes += [axis, None]
        else:
            shape.append(n)
            axes.append(axis)
    changed = changed.reshape(shape)
    n = int(changed.sum())
    lines = []
    for dim, axis in enumerate(axes):
        if axis is not None:
            other = [d for d in range(changed.dim()) if d != dim]
            ratios = changed.float().mean(dim=other) if other else changed.float()
            lines.append("  " + summarise_localisation(axis, ratios.tolist()))
    first = f"first at index {write.first}: {write.was:.6g} before the launch, {write.now:.6g} after"
    return Finding(
        Outcome.CONTRACT,
        f"the kernel wrote into input {write.name}: {n} of {changed.numel()} elements changed{_where(changed, axes)}",
        "\n".join([f"  {first}", *lines]),
    )


# -- outputs --------------------------------------------------------------------

def _output_findings(case: Case, ci: CaseInputs, name: str, axes, actual: torch.Tensor,
                     expected: torch.Tensor, rows: torch.Tensor | None, metrics: dict,
                     exact: torch.Tensor | None = None, judge: "comparators.Context | None" = None,
                     poison: int | None = None) -> list[Finding]:
    """Poison left (UNWRITTEN), non-finite values, then the comparison: the output's comparator when
    the case names one (a spec op's ``compare:``), else ``ratio_allclose`` for a floating output
    and an exact comparison for an integer or bool one, each localised along every named dim."""
    if rows is not None and not bool(rows.any()):
        metrics["compare"][name] = {"skipped": "every row has slot < 0"}
        return []
    findings = []
    row_mask = (rows if rows is not None else torch.ones(actual.shape[0], dtype=torch.bool)).to(actual.device)
    compared = row_mask.view(-1, *([1] * (actual.dim() - 1))).expand(actual.shape)

    unwritten = poison_mask(actual, poison) & compared
    n_unwritten = int(unwritten.sum())
    if n_unwritten:
        where = _where(unwritten, axes)
        findings.append(Finding(
            Outcome.UNWRITTEN,
            f"{name}: {n_unwritten} / {int(compared.sum())} elements never written (poison left){where}",
        ))
    nonfinite = ~torch.isfinite(actual.float()) & compared & ~unwritten
    n_nonfinite = int(nonfinite.sum())
    if n_nonfinite:
        findings.append(Finding(
            Outcome.NONFINITE,
            f"{name}: {n_nonfinite} NaN/Inf elements computed by the kernel{_where(nonfinite, axes)}",
        ))

    tol = case.tolerance_for(name)
    if judge is not None:
        return findings + judge.run(name, actual, expected, axes, tol, metrics)
    if not (actual.is_floating_point() and expected.is_floating_point()):
        return findings + comparators.exact(name, actual, expected, axes, compared & ~unwritten, metrics)
    golden_rounded = expected.dtype if expected.dtype in ULP_DTYPES else None
    if expected.dtype not in (torch.float32, torch.float64):     # a spec golden stored in bf16, fp16, fp8
        expected = expected.float()
    declared = packs.find(case.op) if case.spec is None else None
    groups = {"batch": (0, ci.row_seq)} if declared is not None and declared.rows_by_sequence else None
    slack = rounding_slack(actual, expected, exact, tol)
    if golden_rounded is not None:
        slack = _golden_rounding(expected, golden_rounded, slack)
    cmp = ratio_allclose(actual, expected, atol=tol.atol, rtol=tol.rtol, max_error_ratio=tol.max_error_ratio,
                         name=name, axes=axes, groups=groups, rows=rows, slack=slack, stored=stored_dtype(actual),
                         atol_rms=tol.atol_rms)
    metrics["compare"][name] = _with_spread(cmp.to_metrics(), expected, exact)
    if not cmp.passed:
        line = _mismatch_line(cmp) + (_bad_where(cmp) if case.spec is not None else "")
        findings.append(Finding(Outcome.MISMATCH, line, cmp.report()))
    elif tol.argmax_margin is not None:
        findings += _argmax_findings(name, actual, expected, row_mask, tol.argmax_margin, metrics)
    return findings


def _golden_rounding(expected: torch.Tensor, dtype: torch.dtype, slack: torch.Tensor | None) -> torch.Tensor:
    """A golden that wrote its output in bf16 or fp16 (a spec golden, in place) is itself a rounding:
    it is up to half an ulp of that dtype off the value it computed, so a correct kernel rounding a
    value a hair away (fp32 arithmetic against the golden's fp64) may land one whole ulp from it.
    That half ulp is added to every element's bound (``slack``), on top of the kernel's own."""
    s = half_ulp(expected.abs().nan_to_num(0.0, 0.0, 0.0), dtype)
    return s if slack is None else slack + s


def _bad_where(cmp: Comparison) -> str:
    """`` in dim0 [7], dim1 all 256``: the indices of each localised dim that hold a bad element."""
    parts = []
    for axis, ratios in cmp.localisation.items():
        idx = [i for i, r in enumerate(ratios) if r == r and r > 0]
        if idx and len(idx) == len(ratios) and len(idx) > 1:
            parts.append(f"{axis} all {len(idx)}")
        elif idx:
            parts.append(f"{axis} [{', '.join(map(str, idx[:_MAX_LISTED]))}{', ...' if len(idx) > _MAX_LISTED else ''}]")
    return " in " + ", ".join(parts) if parts else ""


def _with_spread(data: dict, expected: torch.Tensor, exact: torch.Tensor | None) -> dict:
    """The comparison's metrics, plus the largest rounding spread |golden@exact - golden| when there is one."""
    if exact is not None and expected.numel():
        data["rounding_spread_max"] = float((exact.to(expected.device) - expected).abs().max())
        data["accept_rule"] = ACCEPT_RULE
    return data


def _mismatch_line(cmp: Comparison) -> str:
    return (f"{cmp.name}: {cmp.bad_count} / {cmp.numel} elements bad ({100 * cmp.bad_ratio:.1f}%), "
            f"allowed {cmp.allowed_bad}; greatest |diff| {cmp.max_abs_error:.4g} at {cmp.max_abs_index}")


def _where(mask: torch.Tensor, axes) -> str:
    """`` in batch [1, 3], head [0..3]``: which indices of each named axis hold any flagged element."""
    parts = []
    for dim, axis in enumerate(axes):
        if axis is None:
            continue
        other = [d for d in range(mask.dim()) if d != dim]
        hit = mask.any(dim=other) if other else mask
        idx = hit.nonzero().flatten().tolist()
        if len(idx) == mask.shape[dim]:
            parts.append(f"{axis} all {len(idx)}")
        else:
            shown = ", ".join(map(str, idx[:_MAX_LISTED])) + (", ..." if len(idx) > _MAX_LISTED else "")
            parts.append(f"{axis} [{shown}]")
    return " in " + ", ".join(parts) if parts else ""


def _argmax_findings(name: str, actual: torch.Tensor, expected: torch.Tensor, rows: torch.Tensor,
                  margin: float, metrics: dict) -> list[Finding]:
    """An argmax flip is a near tie when the golden's logit gap between the two picks is within margin."""
    a_arg = actual.float().argmax(dim=-1)
    e_arg = expected.argmax(dim=-1)
    flipped = ((a_arg != e_arg) & rows).nonzero().flatten().tolist()
    ties, hard = [], []
    for r in flipped:
        gap = float(expected[r, e_arg[r]] - expected[r, a_arg[r]])
        (ties if gap <= margin else hard).append((r, int(a_arg[r]), int(e_arg[r]), gap))
    metrics["argmax"] = {"compared_rows": int(rows.sum()), "near_ties": len(ties), "flips": len(hard)}
    findings = []
    if hard:
        r, a, e, gap = hard[0]
        findings.append(Finding(
            Outcome.MISMATCH,
            f"{name}: argmax differs in {len(hard)} rows beyond the near-tie margin {margin:g}: "
            f"row {r} picked {a}, golden {e} (golden gap {gap:.4g})",
        ))
    if ties:
        r, a, e, gap = ties[0]
        findings.append(Finding(
            Outcome.NEAR_TIE,
            f"{name}: argmax differs in {len(ties)} rows within the near-tie margin {margin:g}: "
            f"row {r} picked {a}, golden {e} (golden gap {gap:.4g})",
        ))
    return findings


# -- caches -----------------------------------------------------------------------

def _cache_findings(case: Case, ci: CaseInputs, name: str, before: torch.Tensor, after: torch.Tensor,
                    golden_rows: torch.Tensor | None, metrics: dict,
                    exact: torch.Tensor | None = None) -> list[Finding]:
    """Rows at valid slots match the golden; every other row is bit-identical to its canary."""
    P = case.geometry.page_size
    layered = before.dim() == 5
    L = before.shape[0] if layered else 1
    row_shape = before.shape[-2:]
    flat_before = before.reshape(L, -1, *row_shape)
    flat_after = after.reshape(L, -1, *row_shape)
    findings = []
    device = after.device

    written = ci.slots[ci.slots >= 0] if ci.op.writes_cache else ci.slots[:0]
    on_device = written.to(device)
    if golden_rows is not None and len(written):
        valid = (ci.slots >= 0).to(device)
        expected = (golden_rows if layered else golden_rows.unsqueeze(0))[:, valid]
        if exact is not None:
            exact = (exact if layered else exact.unsqueeze(0))[:, valid]
        actual = flat_after[:, on_device]
        tol = case.tolerance_for(name)
        cmp = ratio_allclose(
            actual, expected, atol=tol.atol, rtol=tol.rtol, max_error_ratio=tol.max_error_ratio,
            name=f"{name} rows", axes=("layer", "row", "kv_head", None),
            groups={"page": (1, written // P), "batch": (1, ci.row_seq[valid])},
            slack=rounding_slack(actual, expected, exact, tol), stored=stored_dtype(actual),
            atol_rms=tol.atol_rms,
        )
        metrics["compare"][name] = _with_spread(cmp.to_metrics(), expected, exact)
        if not cmp.passed:
            findings.append(Finding(Outcome.MISMATCH, _mismatch_line(cmp), cmp.report()))

    untouched = torch.ones(flat_before.shape[1], dtype=torch.bool, device=device)
    untouched[on_device] = False
    changed = torch.zeros(L, flat_before.shape[1], dtype=torch.bool, device=device)
    for layer in range(L):     # a layer at a time: the elementwise mask is a layer's size, not the cache's
        changed[layer] = bits(flat_after[layer]).ne(bits(flat_before[layer])).flatten(1).any(dim=1)
    changed &= untouched
    n_changed = int(changed.sum())
    if n_changed:
        listed = []
        for layer, slot in changed.nonzero()[:_MAX_LISTED].tolist():
            prefix = f"layer {layer} " if layered else ""
            listed.append(f"{prefix}slot {slot} (page {slot // P}, offset {slot % P})")
        more = ", ..." if n_changed > _MAX_LISTED else ""
        # A negative slot used as a Python/torch index wraps to the end of the cache.
        rows_total = flat_before.shape[1]
        wrapped = sorted({rows_total + s for s in ci.slots.tolist() if s < 0}) if ci.op.writes_cache else []
        hint = ""
        if wrapped and bool(changed[:, wrapped].any()):
            hint = " (where a negative slot lands when used as an index: a write for slot < 0)"
        findings.append(Finding(
            Outcome.CONTRACT,
            f"{name}: {n_changed} rows outside the slot mapping changed: {', '.join(listed)}{more}{hint}",
        ))
    return findings
