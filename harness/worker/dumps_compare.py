"""One dumped intermediate against its golden, then the verdicts of a whole launch's dumps.

``measure`` compares one tensor as the outputs are compared (``ratio_allclose`` with the
tolerance of the output it is nearest to, the rounding spread as slack, localised per row and
head) and adds the precision metrics a model-level precision tool reports for each API's
output: cosine similarity, max absolute and relative error, and the share of elements whose
relative error exceeds 1/1000 and 5/1000.  ``bit_exact``: every compared element equals the
golden rounded to the dump's dtype (or to a narrower float dtype, for a dump upcast before it was
written).

``verdicts`` turns the measurements (keyed by name, in any order, any subset) into one
``Verdict`` per intermediate of the op in dataflow order, and ``first_bad`` names the first
``bad`` one: everything after it that consumes it is ``inherited``.
"""
from __future__ import annotations

import enum
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.intermediates.spec import Intermediate
from harness.worker.ratio_allclose import intra_op_threads, ratio_allclose, summarise_localisation

# the precision tool's thresholds: relative error above 1/1000 and above 5/1000
THRESHOLDS = (0.001, 0.005)


class Verdict(str, enum.Enum):
    OK = "ok"
    BIT_EXACT = "bit-exact"       # ok, and every element is the golden rounded to the dump's dtype
    BAD = "bad"
    INHERITED = "inherited"       # bad, but an intermediate it consumes (dumped) is bad already
    MISSING = "missing"           # not dumped
    REFUSED = "refused"           # dumped, but the ABI refused it (its problem line says why)
    NOT_COMPARED = "not compared"  # dumped, but none of its rows is judged (every row padding)

    @property
    def good(self) -> bool:
        return self in (Verdict.OK, Verdict.BIT_EXACT)


@dataclass(frozen=True)
class Measurement:
    """What the comparison of one dumped intermediate found (plain data: it crosses the pipe)."""

    name: str
    passed: bool
    bit_exact: bool
    dtype: str
    metrics: dict[str, Any]            # cosine, max_abs, max_rel, over_1e-3, over_5e-3, bad_ratio, ...
    localisation: dict[str, tuple[float, ...]] = field(default_factory=dict)
    note: str = ""                     # e.g. "12 NaN/Inf"


@dataclass(frozen=True)
class Row:
    """One line of the table of intermediates."""

    name: str
    verdict: Verdict
    layer: int | None
    measurement: Measurement | None

    def to_json(self) -> dict[str, Any]:
        m = self.measurement
        return {"name": self.name, "verdict": self.verdict.value, "layer": self.layer,
                "metrics": {} if m is None else {**m.metrics, "dtype": m.dtype, "note": m.note,
                                                 "localisation": {k: list(v) for k, v in m.localisation.items()}}}


def measure(item: Intermediate, actual: torch.Tensor, golden: torch.Tensor, exact: torch.Tensor | None, *,
            atol: float, rtol: float, max_error_ratio: float, rows: torch.Tensor | None = None,
            atol_rms: float | None = None) -> Measurement:
    """Compare ``actual`` (any float dtype, on any device) with ``golden`` (fp32/fp64, same shape).

    On one CPU thread, as ``ratio_allclose`` walks: a tiny intermediate's dot product and norms
    on the machine's OpenMP threads cost ten times the rest of the comparison on a busy box, and
    their last bits depended on the thread count (bench/bench_intermediates.py)."""
    with torch.no_grad(), intra_op_threads(1):
        return _measure(item, actual, golden, exact, atol=atol, rtol=rtol, max_error_ratio=max_error_ratio,
                        rows=rows, atol_rms=atol_rms)


def _measure(item: Intermediate, actual: torch.Tensor, golden: torch.Tensor, exact: torch.Tensor | None, *,
             atol: float, rtol: float, max_error_ratio: float, rows: torch.Tensor | None,
             atol_rms: float | None = None) -> Measurement:
    device = actual.device
    g = golden.to(device)
    slack = None if exact is None else (exact.to(device=device, dtype=g.dtype) - g).abs()
    cmp = ratio_allclose(actual, g, atol=atol, rtol=rtol, max_error_ratio=max_error_ratio, name=item.name,
                         axes=item.axes_for(actual.dim()), rows=rows, slack=slack,
                         atol_rms=atol_rms)
    a, e = actual, g
    if rows is not None and not bool(rows.all()):
        keep = rows.to(device)
        a, e = a[keep], e[keep]
    # fp32 (fp64 when either side is): what ratio_allclose compares in
    wide = torch.float64 if torch.float64 in (a.dtype, e.dtype) else torch.float32
    af, ef = a.to(wide).flatten(), e.to(wide).flatten()
    n = max(int(af.numel()), 1)
    # max abs / max rel over the finite pairs and the NaN/Inf counts are ratio_allclose's own (the
    # same definitions); only a pair with a NaN/Inf makes the metrics below mask them out
    unfinite = 0
    if cmp.nonfinite_actual or cmp.nonfinite_expected:
        finite = torch.isfinite(af) & torch.isfinite(ef)
        unfinite = int(finite.numel()) - int(finite.sum())
        af, ef = af[finite], ef[finite]
    # Each count or norm an earlier figure settles is not taken: every finite pair equal (max abs
    # 0) has no relative error above a threshold, equal norms and is bit-exact; a max relative
    # error at or below a threshold has nothing above it.  (ratio_allclose's max rel is the largest
    # |a - e| / |e| of these very pairs, in the same dtype.)
    same = cmp.max_abs_error == 0.0 and not unfinite
    over = [0 if same or cmp.max_rel_error <= t else None for t in THRESHOLDS]
    if None in over:
        # |a - e| / |e|: inf where a != e == 0, NaN where both are 0 (not above any threshold, as 0 is not)
        rel = (af - ef).abs_().div_(ef.abs())
        over = [int(torch.count_nonzero(rel > t)) if c is None else c for t, c in zip(THRESHOLDS, over)]
    if af.numel():
        na = float(af.norm())
        norms = (na, na if same else float(ef.norm()))
    else:
        norms = ()
    metrics: dict[str, Any] = {
        **scale_ratio(a, e),
        "cosine": _cosine(af, ef, *norms),
        "max_abs": cmp.max_abs_error,
        "max_rel": cmp.max_rel_error,
        **{f"over_{t:g}": float(c + unfinite) / n for t, c in zip(THRESHOLDS, over)},
        "bad_ratio": cmp.bad_ratio, "bad_count": cmp.bad_count, "numel": cmp.numel,
        "atol": atol, "rtol": rtol, "max_error_ratio": max_error_ratio,
    }
    # bit-exact counts only for a passing intermediate: a failing one skips the roundings, an equal
    # one needs none (the golden is then a value of the dump's dtype, its own rounding)
    bit_exact = cmp.passed and a.is_floating_point() and (
        same or any(torch.equal(a, e.to(d).to(a.dtype)) for d in _stored_as(a.dtype)))
    note = f"{cmp.nonfinite_actual} NaN/Inf" if cmp.nonfinite_actual else ""
    return Measurement(item.name, cmp.passed, bit_exact, str(actual.dtype).removeprefix("torch."),
                       metrics, dict(cmp.localisation), note)


# a uniform ratio this far from 1 (and this tight) is named as a scale error
SCALE_FAR = 1.25
SCALE_TIGHT = 1.05


def scale_ratio(a: torch.Tensor, e: torch.Tensor) -> dict[str, float]:
    """The median of actual / golden over the elements whose golden is not tiny, its p10 and p90,
    and the median of each row (dim 0) at its least and most: a wrong scale shows a ratio far
    from 1 that every row shares, which cosine (1.0) and the bad share (100%) do not say."""
    if a.numel() == 0 or a.dim() == 0:
        return {}
    af, ef = a.to(torch.float64).reshape(a.shape[0], -1), e.to(torch.float64).reshape(e.shape[0], -1)
    big = ef.abs() > 1e-3 * float(ef.abs().amax()) if ef.numel() else ef.bool()
    big &= torch.isfinite(af) & torch.isfinite(ef)
    if not bool(big.any()):
        return {}
    r = af[big] / ef[big]
    p10, med, p90 = (float(x) for x in torch.quantile(r[:1 << 20], torch.tensor([0.1, 0.5, 0.9], dtype=r.dtype)))
    rows = [float(torch.median(af[i][big[i]] / ef[i][big[i]])) for i in range(af.shape[0]) if bool(big[i].any())]
    return {"ratio": med, "ratio_p10": p10, "ratio_p90": p90, "ratio_row_min": min(rows), "ratio_row_max": max(rows)}


def scale_hint(name: str, m: Mapping[str, Any]) -> str:
    """``q_norm is 5.66× the golden in every row: a scale or normalisation factor``, or ""."""
    r = m.get("ratio")
    if not isinstance(r, float) or r <= 0 or max(r, 1 / r) < SCALE_FAR:
        return ""
    lo, hi = min(m["ratio_p10"], m["ratio_row_min"]), max(m["ratio_p90"], m["ratio_row_max"])
    if lo <= 0 or hi / lo > SCALE_TIGHT:
        return ""
    return f"{name} is {r:.3g}× the golden in every row: a scale or normalisation factor"


@functools.lru_cache(maxsize=None)
def _stored_as(dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """The dtypes a dump of ``dtype`` may hold values of: its own, or a narrower one upcast before dumping
    (a bf16 row written out as fp32 is still bit-exact when it is the golden rounded to bf16)."""
    narrower = (torch.bfloat16, torch.float16, torch.float32)
    size = torch.empty((), dtype=dtype).element_size()
    return (dtype, *(d for d in narrower if d != dtype and torch.empty((), dtype=d).element_size() < size))


def _cosine(a: torch.Tensor, e: torch.Tensor, na: float = math.nan, ne: float = math.nan) -> float:
    """``na``, ``ne``: the norms of ``a`` and ``e``, already on the host."""
    if a.numel() == 0:
        return math.nan
    if na == 0 or ne == 0:
        return 1.0 if na == ne else 0.0
    return float((a @ e) / (na * ne))


def verdicts(items: Sequence[Intermediate], measured: Mapping[str, Measurement],
             refused: Mapping[str, str] | None = None) -> tuple[Row, ...]:
    """One row per intermediate in dataflow order.  A failed comparison is ``bad``, or ``inherited``
    when one of its direct upstream intermediates was dumped and is bad or inherited.  ``refused``:
    the intermediates whose dump the ABI refused (as not dumped for what follows them)."""
    rows: list[Row] = []
    state: dict[str, Verdict] = {}
    for item in items:
        m = measured.get(item.name)
        if m is None:
            verdict = Verdict.REFUSED if refused and item.name in refused else Verdict.MISSING
        elif not m.metrics.get("numel", 1):
            verdict = Verdict.NOT_COMPARED
        elif m.passed:
            verdict = Verdict.BIT_EXACT if m.bit_exact else Verdict.OK
        elif any(state.get(up) in (Verdict.BAD, Verdict.INHERITED) for up in item.upstream):
            verdict = Verdict.INHERITED
        else:
            verdict = Verdict.BAD
        state[item.name] = verdict
        rows.append(Row(item.name, verdict, item.layer, m))
    return tuple(rows)


def first_bad(rows: Sequence[Row]) -> Row | None:
    return next((r for r in rows if r.verdict is Verdict.BAD), None)


def headline(rows: Sequence[Row], outputs: bool = True) -> str:
    """``first bad intermediate k_rope (q_rope, v bit-exact; k_rope kv_head 0-1 bad in 100% rows)``, or
    where every dumped intermediate being right puts the error."""
    refused = [r.name for r in rows if r.verdict is Verdict.REFUSED]
    empty = [r.name for r in rows if r.verdict is Verdict.NOT_COMPARED]
    unjudged = f"{_names(empty)} not compared (every row padding)" if empty else ""
    dumped = [r for r in rows if r.verdict not in (Verdict.MISSING, Verdict.REFUSED, Verdict.NOT_COMPARED)]
    if not dumped:
        why = "; ".join(x for x in (f"{_names(refused)} refused" if refused else "", unjudged) if x)
        return f"no intermediate compared ({why})" if why else "no intermediate dumped"
    bad = first_bad(rows)
    exact = [r.name for r in dumped if r.verdict is Verdict.BIT_EXACT]
    ok = [r.name for r in dumped if r.verdict is Verdict.OK]
    before = "; ".join(part for part in (
        f"{_names(exact)} bit-exact" if exact else "", f"{_names(ok)} ok" if ok else "", unjudged) if part)
    if bad is None:
        said = f"every dumped intermediate ok (last: {dumped[-1].name}" + (f"; {unjudged})" if unjudged else ")")
        # offline there are no outputs, so nothing to place an error after
        return said if not outputs else (f"{said}: the error is after it (the store, the cast, "
                                         f"the buffer written)")
    where = _where(bad)
    scaled = scale_hint(bad.name, bad.measurement.metrics) if bad.measurement else ""
    where = "; ".join(x for x in (where, f"hint: {scaled}" if scaled else "") if x)
    layer = f" in layer {bad.layer}" if bad.layer is not None else ""
    also = [r.name for r in rows if r.verdict is Verdict.BAD and r is not bad]
    # a refused dump upstream of the first bad one: the error may start there, unseen
    unseen = [n for n in refused if rows.index(next(r for r in rows if r.name == n)) < rows.index(bad)]
    inside = "; ".join(part for part in (before, where, f"also bad: {_names(also)}" if also else "",
                                         f"{_names(unseen)} refused, so the error may start before it" if unseen
                                         else "") if part)
    return f"first bad intermediate {bad.name}{layer}" + (f" ({inside})" if inside else "")


def _names(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 6 else ", ".join(names[:5]) + f" and {len(names) - 5} more"


def _where(row: Row) -> str:
    m = row.measurement
    if m is None:
        return ""
    parts = [m.note] if m.note else []
    loc = {k: v for k, v in m.localisation.items() if k != "row"}
    for axis, ratios in loc.items():
        parts.append(f"{row.name} " + summarise_localisation(axis, ratios))
    if not loc:
        parts.append(f"{row.name} {100 * m.metrics.get('bad_ratio', 0.0):.1f}% bad")
    return "; ".join(parts)
