"""A frozen copy of harness/worker/ratio_allclose.py before the one-read-pass rewrite: the reference the
equivalence test (test_ratio_allclose_equivalence.py) holds the new implementation to, bit for bit.

The original module docstring follows.

Semantics
---------
``ratio_allclose(actual, expected, atol=, rtol=, max_error_ratio=)``:

* values are compared in float32, or float64 when either input is float64
  (bf16/fp16 are widened exactly before anything is subtracted);
* an element is *bad* when ``|a - e| > atol + rtol * |e|``, evaluated in that
  dtype as the expression reads (``rtol * |e|`` rounded, then ``+ atol`` rounded);
  with ``slack=`` (a tensor of expected's shape, >= 0) the bound is
  ``atol + rtol * |e| + slack`` per element (the checker passes the rounding
  spread ``|golden_exact - golden|``, docs/contracts.md "Rounding spread");
  with ``stored=`` (bfloat16 or float16: the dtype ``actual`` was stored in) the
  bound admits at least half an ulp of that dtype at ``e`` plus ``atol``:
  ``max(atol + rtol * |e|, half_ulp(e) + atol) [+ slack]``, where ``half_ulp(e)`` is
  ``2^(max(floor(log2 |e|), emin) - p)`` (``p`` significand bits with the
  implicit one: 8 for bf16, 11 for fp16; ``emin`` the smallest normal exponent:
  -126, -14).  The correct rounding of ``e`` to that dtype is within it, so it
  is never bad, whatever atol and rtol say, and neither is the rounding of any
  value within ``atol / 2`` of ``e`` (docs/contracts.md "Tolerances and the
  rounding of the stored value");
* with ``atol_rms=`` (a fraction, > 0) ``atol`` scales with the signal: each
  element's atol is ``atol_rms`` times the RMS of its row of ``expected`` (the
  last dim: one head's ``D`` values), at most ``atol`` and at least
  ``atol / ATOL_RMS_FLOOR`` (docs/contracts.md "The bound follows the signal");
  every other term above uses that atol.  A row's RMS is taken of ``expected``
  alone, so the bound cannot be moved by the values under test;
* an element where either side is NaN or +-Inf is bad too, and any such element
  fails the comparison whatever ``max_error_ratio`` says;
* it passes when ``bad_count <= round(max_error_ratio * numel)`` and nothing is
  non-finite.  ``round`` is Python's (half to even: 2.5 -> 2, 1.5 -> 2).

``numel`` counts compared elements only: with ``rows=`` (a bool mask over dim 0)
the other rows are skipped entirely (not counted, not checked for NaN).  Every
index reported is an index of the full tensor.

The relative error ``|a - e| / |e|`` (inf where ``e == 0 != a``, 0 where both
are 0) is reported but decides nothing.

The input is walked in chunks of at most ``chunk_elems`` elements, each made of
whole rows of the trailing dims, through preallocated buffers: the extra
memory is O(chunk_elems) plus one counter per index of each localised dim,
whatever the size or strides of the inputs (no input is copied whole).
Chunks with nothing bad and nothing non-finite cost no localisation work (the
compared-element counts per index follow from the shape and ``rows``), and the
counters (and the 2-D map's) are made by the first chunk with a bad element: a
comparison with nothing bad makes none, and reads its all-zero localisation
off the shape and ``rows``.  The
walk runs under ``torch.no_grad()`` with torch's CPU ops on one thread (the
caller's thread count is restored after): per-chunk ops are too small to
share, and spinning OpenMP threads on a loaded machine made them 25x slower.

Failures of the *call* (shapes differ, a bad ``axes``/``groups``/``rows``/
tolerance) raise ``ValueError``; a mismatch is an ordinary ``Comparison``
with ``passed=False``.

Report format
-------------
``Comparison.report()`` renders one fixed text, numbers with ``:.6g``,
percentages with one decimal (``<0.1%`` / ``>99.9%`` when rounding would hide
a non-zero or a non-total share)::

    out: MISMATCH 1234 / 2048 elements bad (60.3%), allowed 10 (max_error_ratio 0.005) with atol 0.003, rtol 0.003
      greatest absolute difference: 2.5 at index (3, 1, 7) (up to 0.010875 allowed)
      greatest relative difference: 0.952381 at index (3, 1, 7)
      worst elements: (3, 1, 7) actual 0.125 expected 2.625 |diff| 2.5; (0, 2, 1) actual ...
      non-finite: actual 0, expected 0
      localisation:
        batch: all 16 indices bad (min 58.0%, max 63.1%)
        head: 1 of 4 bad: [2] 100.0%

* First word after the name: ``PASS``, ``MISMATCH`` (too many bad elements) or
  ``NONFINITE`` (a NaN/Inf among compared elements; checked first).
* "up to X allowed" is the bound (``atol + rtol * |e|``, with the slack and the
  half ulp when given) at the index of the greatest absolute difference.
* With ``stored=`` the headline ends ``, at least half a bfloat16 ulp + atol``
  (or float16).
* With ``atol_rms=`` the atol reads ``atol 0.003 scaled to 0.02 x row RMS (down to
  0.000432)``: the cap, the fraction and the smallest atol of a compared row.
* Both "greatest" lines are over pairs where both sides are finite; with no
  such pair they read ``none (no finite pairs compared)``.
* ``worst elements``: up to 5 bad elements, largest ``|diff|`` first (NaN and
  Inf pairs rank above every finite one; ties go to the lower row-major index),
  joined by ``"; "``; ``none`` when nothing is bad.
* ``localisation`` (present when ``axes`` or ``groups`` named something), one
  line per name, in the order axes then groups; ``K`` counts the indices that
  had compared elements:

  - ``name: none of K indices bad``
  - ``name: all K indices bad (min a%, max b%)``
  - ``name: n of K bad: [i] r%, [j] r%`` (n <= 8: every bad index, index order)
  - ``name: n of K bad (min a%, max b%); clean: [i], [j]`` (n > 8, at most 8 clean)
  - ``name: n of K bad (min a%, max b%): [i] r%, ... (8 listed), ...`` otherwise
  - each followed by ``; U not compared`` when U indices had no compared element.

2-D map
-------
With two or more named ``axes`` the comparison also keeps a map of the bad
ratio over two of them (``Comparison.map``; the first two named dims, leaving
out dims of size 1 while two others remain: ``batch`` x ``head`` for attention
outputs, ``row`` x ``kv_head`` for a single-layer cache).  Each axis is cut
into at most ``MAP_CELLS`` blocks of ``ceil(n / MAP_CELLS)`` consecutive
indices (the last block may be shorter); a cell holds bad / compared elements
summed over its block.  Counts are added per chunk into the blocked grid (one
int64 per cell), so the map costs no full-size temporary.  It is not part of
the text report, and is ``None`` when no element is bad.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import math
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

import torch

from harness.outcomes import Outcome

__all__ = ["ATOL_RMS_FLOOR", "Comparison", "ULP_DTYPES", "half_ulp", "ratio_allclose", "row_atol",
           "summarise_localisation"]

# ``atol_rms`` shrinks a row's atol at most this many times: a row whose golden is (nearly) all
# zeros keeps a bound a correct kernel's accumulation error fits in, not zero.
ATOL_RMS_FLOOR = 16

Index = tuple[int, ...]

_KEEP_WORST = 5
_KEEP_FIRST = 5
_KEEP_LISTED = 8
# A chunk whose bad elements are fewer than 1/_SPARSE of it is localised from
# the bad elements' flat indices; denser ones by reducing the mask.
_SPARSE = 16
# The 2-D localisation map has at most this many cells along each of its axes.
MAP_CELLS = 64

# Stored dtypes whose half ulp can join the bound: (significand bits p with the implicit one,
# smallest normal exponent emin).  Their grid in the binade [2^k, 2^(k+1)) is 2^(k+1-p) apart
# (2^(emin+1-p) below 2^emin, the subnormals), so round-to-nearest moves a value by at most
# half of that: 2^(max(k, emin) - p).
ULP_DTYPES: dict[torch.dtype, tuple[int, int]] = {
    torch.bfloat16: (8, -126),
    torch.float16: (11, -14),
    # a spec op's float8 outputs (docs/specs.md)
    **({torch.float8_e4m3fn: (4, -6)} if hasattr(torch, "float8_e4m3fn") else {}),
    **({torch.float8_e5m2: (3, -14)} if hasattr(torch, "float8_e5m2") else {}),
}
_EXPONENT_MASK = {torch.float32: (torch.int32, 0x7F800000), torch.float64: (torch.int64, 0x7FF0000000000000)}


def half_ulp(expected: torch.Tensor, stored: torch.dtype, out: torch.Tensor | None = None) -> torch.Tensor:
    """Half an ulp of ``stored`` at each element of ``expected`` (float32 or float64, finite).

    ``2^floor(log2 |e|)`` is ``e`` with its sign and significand bits cleared (a float32
    subnormal or zero gives 0), scaled by ``2^-p`` and floored at the subnormal half ulp
    ``2^(emin - p)``; every step is exact (powers of two).
    """
    p, emin = ULP_DTYPES[stored]
    itype, mask = _EXPONENT_MASK[expected.dtype]
    out = out if out is not None else torch.empty_like(expected)
    torch.bitwise_and(expected.view(itype), mask, out=out.view(itype))
    return out.mul_(2.0 ** -p).clamp_(min=2.0 ** (emin - p))


@functools.lru_cache(maxsize=64)
def _held_as(x: float, dtype: torch.dtype) -> float:
    """``x`` as a 0-dim tensor of ``dtype`` holds it (a comparison's few tolerances, over and over)."""
    return torch.tensor(x, dtype=dtype).item()


def _half_ulp_scalar(e: float, stored: torch.dtype) -> float:
    p, emin = ULP_DTYPES[stored]
    if e == 0 or not math.isfinite(e):
        return 2.0 ** (emin - p) if e == 0 else math.inf
    return 2.0 ** (max(math.frexp(abs(e))[1] - 1, emin) - p)


# --------------------------------------------------------------------------
# The result and its rendering
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Comparison:
    """The result of one ``ratio_allclose`` call, kept as data, rendered late."""

    name: str
    passed: bool
    numel: int
    bad_count: int
    allowed_bad: int
    atol: float
    rtol: float
    max_error_ratio: float
    nonfinite_actual: int
    nonfinite_expected: int
    max_abs_error: float                 # over finite pairs; NaN when there is none
    max_abs_index: Index                 # () when there is no finite pair
    max_rel_error: float                 # |a-e|/|e|: inf where e == 0 != a
    max_rel_index: Index
    worst: tuple[tuple[Index, float, float, float], ...]   # (index, actual, expected, |diff|)
    first_bad: tuple[Index, ...]         # up to 5, row-major
    localisation: dict[str, tuple[float, ...]]   # name -> bad ratio per index (NaN: none compared)
    max_abs_allowed: float = math.nan    # atol + rtol*|e| at max_abs_index
    # Bad ratio over the first two localised axes, in blocks (see ``_map_dims``):
    # {"axes": [a0, a1], "size": [n0, n1], "block": [b0, b1], "shape": [r, c],
    #  "ratio": r rows of c floats (NaN: nothing compared in that cell)}; None
    # when fewer than two axes are named or nothing is bad (an all-zero map says
    # nothing the counts do not, and would grow every --json result by a few KB).
    # Rendered by the reports, not by report().
    map: dict[str, Any] | None = None
    # The dtype whose half ulp at |e| (plus atol) floors every bound (``stored=``): "bfloat16", "float16", or None.
    stored_ulp: str | None = None
    # ``atol_rms=``: the fraction of a row's RMS that is its atol (capped at ``atol``), and the
    # smallest atol of any compared row; None without it.
    atol_rms: float | None = None
    atol_min: float | None = None

    @property
    def bad_ratio(self) -> float:
        return self.bad_count / self.numel if self.numel else 0.0

    @property
    def outcome(self) -> Outcome:
        """PASS, NONFINITE (any NaN/Inf compared) or MISMATCH (too many bad)."""
        if self.nonfinite_actual or self.nonfinite_expected:
            return Outcome.NONFINITE
        return Outcome.PASS if self.passed else Outcome.MISMATCH

    def to_metrics(self) -> dict[str, Any]:
        """Every field as plain JSON types (tuples become lists).

        Floats stay floats, so NaN (an index with nothing compared, no finite
        pair) and inf (relative error against a zero) pass through as
        ``json.dumps`` writes them by default.
        """
        data = {f.name: _plain(getattr(self, f.name)) for f in fields(self)}
        data["bad_ratio"] = self.bad_ratio
        data["outcome"] = self.outcome.value
        return data

    def report(self) -> str:
        lines = [self._headline()]
        if self._has_finite_pair():
            lines.append(
                f"  greatest absolute difference: {_num(self.max_abs_error)} at index "
                f"{_idx(self.max_abs_index)} (up to {_num(self.max_abs_allowed)} allowed)")
            lines.append(
                f"  greatest relative difference: {_num(self.max_rel_error)} at index "
                f"{_idx(self.max_rel_index)}")
        else:
            lines.append("  greatest absolute difference: none (no finite pairs compared)")
            lines.append("  greatest relative difference: none (no finite pairs compared)")
        if self.worst:
            worst = "; ".join(
                f"{_idx(i)} actual {_num(a)} expected {_num(e)} |diff| {_num(d)}"
                for i, a, e, d in self.worst)
        else:
            worst = "none"
        lines.append(f"  worst elements: {worst}")
        lines.append(f"  non-finite: actual {self.nonfinite_actual}, "
                     f"expected {self.nonfinite_expected}")
        if self.localisation:
            lines.append("  localisation:")
            lines.extend(f"    {summarise_localisation(name, ratios)}"
                         for name, ratios in self.localisation.items())
        return "\n".join(lines)

    def _has_finite_pair(self) -> bool:
        return not math.isnan(self.max_abs_error)

    def _headline(self) -> str:
        return (f"{self.name}: {self.outcome.value} {self.bad_count} / {self.numel} elements bad "
                f"({_pct(self.bad_ratio)}), allowed {self.allowed_bad} "
                f"(max_error_ratio {_num(self.max_error_ratio)}) "
                f"with atol {_num(self.atol)}{self._scaled()}, rtol {_num(self.rtol)}"
                + (f", at least half a {self.stored_ulp} ulp + atol" if self.stored_ulp else ""))


    def _scaled(self) -> str:
        if self.atol_rms is None:
            return ""
        low = f" (down to {_num(self.atol_min)})" if self.atol_min is not None and self.atol_min < self.atol else ""
        return f" scaled to {_num(self.atol_rms)} x row RMS{low}"


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def _num(x: float) -> str:
    return f"{x:.6g}"


def _idx(index: Index) -> str:
    return repr(tuple(index))


def _pct(ratio: float) -> str:
    text = f"{100.0 * ratio:.1f}%"
    if ratio > 0 and text == "0.0%":
        return "<0.1%"
    if ratio < 1 and text == "100.0%":
        return ">99.9%"
    return text


def summarise_localisation(name: str, ratios: Sequence[float]) -> str:
    """One ``localisation`` line of the report (formats above) from the bad ratio per index (NaN: none compared)."""
    compared = [(i, r) for i, r in enumerate(ratios) if not math.isnan(r)]
    bad = [(i, r) for i, r in compared if r > 0]
    n_cmp, n_bad = len(compared), len(bad)
    not_compared = len(ratios) - n_cmp
    tail = f"; {not_compared} not compared" if not_compared else ""
    if n_bad == 0:
        return f"{name}: none of {n_cmp} indices bad{tail}"
    spread = f"min {_pct(min(r for _, r in bad))}, max {_pct(max(r for _, r in bad))}"
    if n_bad == n_cmp:
        return f"{name}: all {n_cmp} indices bad ({spread}){tail}"
    listed = ", ".join(f"[{i}] {_pct(r)}" for i, r in bad[:_KEEP_LISTED])
    if n_bad <= _KEEP_LISTED:
        return f"{name}: {n_bad} of {n_cmp} bad: {listed}{tail}"
    clean = [i for i, r in compared if r == 0]
    if len(clean) <= _KEEP_LISTED:
        shown = ", ".join(f"[{i}]" for i in clean)
        return f"{name}: {n_bad} of {n_cmp} bad ({spread}); clean: {shown}{tail}"
    return f"{name}: {n_bad} of {n_cmp} bad ({spread}): {listed}, ...{tail}"


# --------------------------------------------------------------------------
# Arguments ("not my input" is a ValueError, never a mismatch)
# --------------------------------------------------------------------------

def _valid_tolerance(label: str, value: Any, upper: float | None = None) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{label} must be a number, got {value!r}") from None
    if not math.isfinite(x) or x < 0 or (upper is not None and x > upper):
        bound = f"in [0, {upper:g}]" if upper is not None else "finite and >= 0"
        raise ValueError(f"{label} must be {bound}, got {value!r}")
    return x


def _validate_tensors(actual: Any, expected: Any) -> None:
    for label, t in (("actual", actual), ("expected", expected)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{label} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise ValueError(f"{label} must have a floating dtype, got {t.dtype}")
    if actual.shape != expected.shape:
        raise ValueError(f"shape mismatch: actual {tuple(actual.shape)} "
                         f"vs expected {tuple(expected.shape)}")
    if actual.device != expected.device:
        raise ValueError(f"device mismatch: actual on {actual.device}, "
                         f"expected on {expected.device}")


def _valid_axes(axes: Sequence[str | None] | None, ndim: int) -> dict[int, str]:
    if axes is None:
        return {}
    axes = tuple(axes)
    if len(axes) != ndim:
        raise ValueError(f"axes has {len(axes)} entries for a {ndim}-dim tensor: {axes!r}")
    named: dict[int, str] = {}
    for dim, name in enumerate(axes):
        if name is None:
            continue
        if not isinstance(name, str) or not name:
            raise ValueError(f"axes[{dim}] must be a non-empty str or None, got {name!r}")
        if name in named.values():
            raise ValueError(f"axes[{dim}]: axis name {name!r} used twice")
        named[dim] = name
    return named


def _valid_groups(groups: Mapping[str, tuple[int, Any]] | None, shape: tuple[int, ...],
                  taken: set[str]) -> dict[str, tuple[int, torch.Tensor]]:
    if not groups:
        return {}
    out: dict[str, tuple[int, torch.Tensor]] = {}
    for name, spec in groups.items():
        where = f"groups[{name!r}]"
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: a group name must be a non-empty str")
        if name in taken:
            raise ValueError(f"{where}: name already used by an axis")
        try:
            dim, labels = spec
        except (TypeError, ValueError):
            raise ValueError(f"{where} must be (dim, labels), got {spec!r}") from None
        if not isinstance(dim, int) or not -len(shape) <= dim < len(shape):
            raise ValueError(f"{where}: dim {dim!r} out of range for shape {shape}")
        dim %= len(shape)
        labels = torch.as_tensor(labels).to("cpu")
        if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
            raise ValueError(f"{where}: labels must be integers, got {labels.dtype}")
        if labels.shape != (shape[dim],):
            raise ValueError(f"{where}: labels must have shape ({shape[dim]},) for dim {dim} "
                             f"of {shape}, got {tuple(labels.shape)}")
        out[name] = (dim, labels.to(torch.int64))
    return out


def _valid_rows(rows: Any, shape: tuple[int, ...]) -> torch.Tensor | None:
    if rows is None:
        return None
    if not shape:
        raise ValueError("rows= needs a tensor with at least one dim")
    mask = torch.as_tensor(rows).to("cpu")
    if mask.dtype != torch.bool:
        raise ValueError(f"rows must be a bool mask, got dtype {mask.dtype}")
    if mask.shape != (shape[0],):
        raise ValueError(f"rows must have shape ({shape[0]},), got {tuple(mask.shape)}")
    return mask


def _runs(mask: torch.Tensor | None, n: int) -> list[tuple[int, int]]:
    """Maximal [start, stop) runs of selected rows along dim 0."""
    if mask is None:
        return [(0, n)] if n else []
    runs: list[tuple[int, int]] = []
    for i in torch.nonzero(mask).flatten().tolist():
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


# --------------------------------------------------------------------------
# The chunked walk
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class _Layout:
    """How the (working) shape is cut into chunks.

    Dims ``[split:]`` are whole in every chunk (``row`` elements per row); a
    chunk is ``rows_per_chunk`` consecutive indices of dim ``split - 1`` at
    fixed indices of the dims before it, so every chunk is a basic-indexing
    view (no copy, whatever the strides) and chunks come in row-major order.
    """

    shape: tuple[int, ...]
    split: int
    row: int
    rows_per_chunk: int

    @classmethod
    def plan(cls, shape: tuple[int, ...], chunk_elems: int) -> "_Layout":
        split = len(shape)
        for d in range(1, len(shape) + 1):
            if math.prod(shape[d:]) <= chunk_elems:
                split = d
                break
        row = math.prod(shape[split:])
        return cls(shape, split, row, max(1, chunk_elems // max(row, 1)))

    def chunks(self, start: int, stop: int):
        """(outer, j, m) for the chunks covering dim-0 indices [start, stop)."""
        d, k = self.split, self.rows_per_chunk
        if d == 1:
            for j in range(start, stop, k):
                yield (), j, min(k, stop - j)
            return
        outers = itertools.product(range(start, stop), *(range(n) for n in self.shape[1:d - 1]))
        size = self.shape[d - 1]
        for outer in outers:
            for j in range(0, size, k):
                yield outer, j, min(k, size - j)

    def index(self, outer: Index, j: int, q: int) -> Index:
        """Full-tensor index of flat element ``q`` of chunk (outer, j)."""
        r, c = divmod(q, self.row)
        tail: list[int] = []
        for n in reversed(self.shape[self.split:]):
            c, i = divmod(c, n)
            tail.append(i)
        return outer + (j + r,) + tuple(reversed(tail))


class _Walk:
    """Mutable state of one comparison: buffers, running maxima, counters."""

    def __init__(self, layout: _Layout, dtype: torch.dtype, actual_dtype: torch.dtype,
                 expected_dtype: torch.dtype, device: torch.device, atol: float, rtol: float,
                 loc_dims: set[int], numel: int, ndim: int,
                 map_dims: tuple[int, int] | None = None, slack: torch.Tensor | None = None,
                 stored: torch.dtype | None = None):
        self.layout = layout
        self.slack = slack                    # per-element extra allowance, or None
        self.stored = stored                  # the bound admits half an ulp of it at |e| + atol, or None
        self.s = None                         # this chunk's slice of it
        self.dtype = dtype
        self.atol, self.rtol = atol, rtol
        # atol as the compute dtype holds it: tolerance >= this everywhere.
        self.atol_c = _held_as(atol, dtype)
        self.ndim = ndim                      # of the caller's tensor (0 for a scalar)
        n = min(layout.rows_per_chunk * layout.row, max(numel, 1))
        # Widening buffers, only for an input not already in the compute dtype.
        self.buf_a = self.buf_e = None
        if actual_dtype != dtype:
            self.buf_a = torch.empty(n, dtype=dtype, device=device)
        if expected_dtype != dtype:
            self.buf_e = torch.empty(n, dtype=dtype, device=device)
        self.buf_d = torch.empty(n, dtype=dtype, device=device)
        self.buf_t = torch.empty(n, dtype=dtype, device=device)
        self.buf_r = torch.empty(n, dtype=dtype, device=device)
        self.buf_b = torch.empty(n, dtype=torch.bool, device=device)
        # One bad counter per index of each localised dim, and the map's counters: made by the
        # first chunk with a bad element (``_counters``), so a clean comparison makes none.
        self.loc_dims = tuple(sorted(loc_dims))
        self.counts: dict[int, torch.Tensor] = {}
        # The blocked 2-D map: cell index of each index of the two dims, and
        # one bad counter per cell (flat, row-major).
        self.map_dims = map_dims
        if map_dims is not None:
            (self.map_block0, self.map_rows), (self.map_block1, self.map_cols) = (
                _blocks(layout.shape[d]) for d in map_dims)
        self.bad = 0
        self.nonfinite_a = 0
        self.nonfinite_e = 0
        self.max_abs, self.max_abs_at, self.max_abs_allowed = -1.0, None, math.nan
        self.max_rel, self.max_rel_at = -1.0, None
        self.worst: list[tuple[float, int, int, Index, float, float, float]] = []
        self.first: list[Index] = []
        self.seq = 0

    # -- one chunk ---------------------------------------------------------

    def add(self, actual: torch.Tensor, expected: torch.Tensor, outer: Index, j: int, m: int):
        lay = self.layout
        n = m * lay.row
        view_shape = (m,) + lay.shape[lay.split:]
        sel = outer + (slice(j, j + m),)
        a, e = actual[sel], expected[sel]
        self.s = None if self.slack is None else self.slack[sel].to(self.dtype).reshape(-1)
        if a.dtype != self.dtype:
            a = self.buf_a[:n].view(view_shape).copy_(a)
        if e.dtype != self.dtype:
            e = self.buf_e[:n].view(view_shape).copy_(e)
        d = self.buf_d[:n].view(view_shape)
        t = self.buf_t[:n].view(view_shape)
        torch.sub(a, e, out=d).abs_()
        torch.abs(e, out=t)                          # |e| until the tolerance is formed
        dmax = d.max().item()
        ctx = (outer, j, a, e)
        if math.isfinite(dmax):
            self._fast(ctx, n, dmax)
        else:
            self._nonfinite(ctx, n)
        self.seq += 1

    def _fast(self, ctx, n: int, dmax: float) -> None:
        d, t = self.buf_d[:n], self.buf_t[:n]
        self._offer_max_abs(ctx, d, dmax)
        if dmax == 0:
            if self.max_rel < 0:                     # every rel error is 0: first one wins
                self.max_rel, self.max_rel_at = 0.0, self.layout.index(ctx[0], ctx[1], 0)
        else:
            r = torch.div(d, t, out=self.buf_r[:n])
            rmax = r.max().item()
            if math.isnan(rmax):                     # 0/0 where both sides are 0
                r.masked_fill_(torch.isnan(r), 0.0)
                rmax = r.max().item()
            self._offer_max_rel(ctx, r, rmax)
        if dmax <= self.atol_c:                      # nothing can exceed atol + rtol*|e|
            return
        h = None if self.stored is None else half_ulp(t, self.stored, out=self.buf_r[:n])
        t.mul_(self.rtol).add_(self.atol)
        if h is not None:
            torch.maximum(t, h.add_(self.atol), out=t)
        if self.s is not None:
            t.add_(self.s)
        bad = torch.gt(d, t, out=self.buf_b[:n])
        nbad = int(bad.sum().item())
        if not nbad:
            return
        self.bad += nbad
        # Keys are |diff| of bad elements; a chunk whose largest |diff| cannot
        # beat the current 5th worst (ties go to earlier chunks) is not ranked.
        could_rank = len(self.worst) < _KEEP_WORST or dmax > -self.worst[-1][0]
        self._record_bad(ctx, bad, nbad, d, could_rank)

    def _nonfinite(self, ctx, n: int) -> None:
        _, _, a, e = ctx
        d, t = self.buf_d[:n], self.buf_t[:n]
        fin_a = torch.isfinite(a).reshape(-1)             # row-major, whatever the strides
        fin_e = torch.isfinite(e).reshape(-1)
        self.nonfinite_a += int((~fin_a).sum().item())
        self.nonfinite_e += int((~fin_e).sum().item())
        fin = fin_a & fin_e
        # d is inf at an overflowing finite pair: still a finite pair, and bad.
        d_fin = d.masked_fill(~fin, -1.0)
        self._offer_max_abs(ctx, d_fin, d_fin.max().item())
        r = torch.div(d, t)
        r.masked_fill_(torch.isnan(r) & fin, 0.0)
        r.masked_fill_(~fin, -1.0)
        self._offer_max_rel(ctx, r, r.max().item())
        tol = t.mul(self.rtol).add_(self.atol)
        if self.stored is not None:          # |e| is finite where it matters: elsewhere ~fin decides
            torch.maximum(tol, half_ulp(t.nan_to_num(0.0, 0.0, 0.0), self.stored).add_(self.atol), out=tol)
        if self.s is not None:
            tol.add_(self.s.view(tol.shape))
        bad = torch.gt(d, tol) | ~fin
        nbad = int(bad.sum().item())
        self.bad += nbad
        key = torch.where(torch.isnan(d), math.inf, d)
        self._record_bad(ctx, bad, nbad, key, True)

    # -- running maxima ------------------------------------------------------

    def _offer_max_abs(self, ctx, d: torch.Tensor, dmax: float) -> None:
        if dmax > self.max_abs:
            q = int(torch.argmax(d).item())          # first occurrence
            outer, j, _, _ = ctx
            self.max_abs = dmax
            self.max_abs_at = self.layout.index(outer, j, q)
            e_abs = self.buf_t.view(-1)[q].item()    # still |e| here
            self.max_abs_allowed = self.atol + self.rtol * e_abs
            if self.stored is not None:
                self.max_abs_allowed = max(self.max_abs_allowed, _half_ulp_scalar(e_abs, self.stored) + self.atol)
            if self.s is not None:
                self.max_abs_allowed += self.s[q].item()

    def _offer_max_rel(self, ctx, r: torch.Tensor, rmax: float) -> None:
        if rmax > self.max_rel:
            outer, j, _, _ = ctx
            q = int(torch.argmax(r).item())
            self.max_rel = rmax
            self.max_rel_at = self.layout.index(outer, j, q)

    # -- bad elements ----------------------------------------------------------

    def _counters(self) -> None:
        """The localisation counters, all zero, on the first chunk that has a bad element."""
        self.counts = {dim: torch.zeros(self.layout.shape[dim], dtype=torch.int64) for dim in self.loc_dims}
        if self.map_dims is not None:
            self.map_counts = torch.zeros(self.map_rows * self.map_cols, dtype=torch.int64)

    def _record_bad(self, ctx, bad: torch.Tensor, nbad: int, key: torch.Tensor,
                    rank: bool) -> None:
        """First bad indices, worst elements and localisation counts of one chunk.

        ``key`` ranks bad elements (|diff|, NaN as inf); only its values at bad
        elements are read.  Sparse chunks work from the bad elements' flat
        indices (one nonzero); dense ones from reductions over the mask.
        """
        outer, j = ctx[0], ctx[1]
        flat, key = bad.view(-1), key.view(-1)
        k = min(nbad, _KEEP_WORST)
        if self.loc_dims and not self.counts:
            self._counters()
        if nbad * _SPARSE < flat.numel():
            qs = torch.nonzero(flat).flatten()
            if len(self.first) < _KEEP_FIRST:
                self.first.extend(self.layout.index(outer, j, q)
                                  for q in qs[:_KEEP_FIRST - len(self.first)].tolist())
            if rank:
                # Stable descending sort of the few keys: equal keys keep index order.
                order = torch.sort(key[qs], descending=True, stable=True).indices[:k]
                self._merge_worst(ctx, qs[order].tolist())
            if self.counts:
                self._localise_sparse(outer, j, qs, nbad)
            return
        if len(self.first) < _KEEP_FIRST:
            qs = torch.nonzero(flat[:_KEEP_FIRST * _SPARSE]).flatten()
            if qs.numel() < _KEEP_FIRST - len(self.first):
                qs = torch.nonzero(flat).flatten()
            self.first.extend(self.layout.index(outer, j, q)
                              for q in qs[:_KEEP_FIRST - len(self.first)].tolist())
        if rank:
            # Bad keys are > 0 (or inf); every other key is finite, so this zeroes them.
            masked = torch.mul(key, flat, out=self.buf_r[:flat.numel()])
            threshold = masked.topk(k).values[-1].item()   # > 0: every bad key is > 0
            above = torch.nonzero(masked > threshold).flatten().tolist()
            at = torch.nonzero(masked == threshold).flatten()[:k - len(above)].tolist()
            self._merge_worst(ctx, above + at)
        if self.counts:
            self._localise_dense(outer, j, flat, nbad)

    def _merge_worst(self, ctx, qs: list[int]) -> None:
        """Merge chunk elements into the running top 5 (largest key, then row-major)."""
        outer, j, a, e = ctx
        d = self.buf_d.view(-1)
        for q in qs:
            index = self.layout.index(outer, j, q)
            local = (index[len(outer)] - j,) + index[len(outer) + 1:]
            diff = d[q].item()
            rank = math.inf if math.isnan(diff) else diff
            self.worst.append((-rank, self.seq, q, index, a[local].item(), e[local].item(), diff))
        self.worst.sort(key=lambda w: w[:3])
        del self.worst[_KEEP_WORST:]

    def _localise_sparse(self, outer: Index, j: int, qs: torch.Tensor, nbad: int) -> None:
        lay = self.layout
        d, row = lay.split, lay.row
        qs = qs.to(torch.device("cpu"))
        ones = torch.ones_like(qs)
        for dim, cnt in self.counts.items():
            if dim < d - 1:
                cnt[outer[dim]] += nbad
            elif dim == d - 1:
                cnt.index_add_(0, qs // row + j, ones)
            else:
                stride = math.prod(lay.shape[dim + 1:])
                cnt.index_add_(0, (qs // stride) % lay.shape[dim], ones)
        if self.map_dims is not None:
            i0, i1 = (self._index_along(dim, outer, j, qs) for dim in self.map_dims)
            cells = (i0 // self.map_block0) * self.map_cols + i1 // self.map_block1
            if isinstance(cells, int):
                self.map_counts[cells] += nbad
            else:                                     # an int side broadcasts
                self.map_counts.index_add_(0, cells, ones)

    def _index_along(self, dim: int, outer: Index, j: int, qs: torch.Tensor):
        """Index along ``dim`` of each flat chunk element ``qs`` (an int when fixed)."""
        lay = self.layout
        if dim < lay.split - 1:
            return outer[dim]
        if dim == lay.split - 1:
            return qs // lay.row + j
        return (qs // math.prod(lay.shape[dim + 1:])) % lay.shape[dim]

    def _localise_dense(self, outer: Index, j: int, flat: torch.Tensor, nbad: int) -> None:
        lay = self.layout
        d, row = lay.split, lay.row
        grid = flat.view(-1, row)
        per_col = per_row = None
        if any(dim >= d for dim in self.counts):
            per_col = grid.sum(0).view(lay.shape[d:])
        if d - 1 in self.counts:
            per_row = grid.sum(1).to("cpu")
        for dim, cnt in self.counts.items():
            if dim < d - 1:
                cnt[outer[dim]] += nbad
            elif dim == d - 1:
                cnt[j:j + grid.shape[0]] += per_row
            else:
                others = [i for i in range(per_col.dim()) if i != dim - d]
                cnt += (per_col.sum(others) if others else per_col).to(cnt.device)
        if self.map_dims is not None:
            self._map_dense(outer, j, grid, nbad, per_row, per_col)

    def _map_dense(self, outer: Index, j: int, grid: torch.Tensor, nbad: int,
                   per_row: torch.Tensor | None, per_col: torch.Tensor | None) -> None:
        """Add a dense chunk's bad counts to the map from reductions of its mask."""
        lay = self.layout
        d = lay.split
        d0, d1 = self.map_dims                       # d0 < d1
        k0, k1 = self.map_block0, self.map_block1
        m = grid.shape[0]
        if d1 < d - 1:                               # both fixed in this chunk
            self.map_counts[outer[d0] // k0 * self.map_cols + outer[d1] // k1] += nbad
            return
        grid2 = self.map_counts.view(-1, self.map_cols)
        if d0 < d - 1:                               # one fixed, the other a vector
            row = grid2[outer[d0] // k0]
            if d1 == d - 1:                          # indices j..j+m-1 (m: rows of the chunk)
                cols = torch.arange(j, j + m, dtype=torch.int64) // k1
                row.index_add_(0, cols, per_row)
            else:
                others = [i for i in range(per_col.dim()) if i != d1 - d]
                row += _sum_blocks(per_col.sum(others) if others else per_col, k1).to("cpu")
            return
        # A (rows, n1) grid of counts (within one chunk's size), summed in blocks
        # along d1 by a strided view, then its rows added to their cells.
        if d0 == d - 1:
            tail = grid.view(m, *lay.shape[d:])
            others = [1 + i for i in range(tail.dim() - 1) if i != d1 - d]
            counts = tail.sum(others, dtype=torch.int32) if others else tail
            rows = torch.arange(j, j + m, dtype=torch.int64) // k0
        else:
            others = [i for i in range(per_col.dim()) if i not in (d0 - d, d1 - d)]
            counts = per_col.sum(others) if others else per_col
            rows = torch.arange(counts.shape[0], dtype=torch.int64) // k0
        grid2.index_add_(0, rows, _sum_blocks(counts, k1).to("cpu", torch.int64))

    # -- the result ------------------------------------------------------------

    def public(self, index: Index | None) -> Index:
        """The caller's index: () for a 0-dim tensor, walked as shape (1,)."""
        if index is None or self.ndim == 0:
            return ()
        return tuple(index)


@contextlib.contextmanager
def _intra_op_threads(n: int):
    """Run torch CPU ops on ``n`` threads, restoring the caller's setting after.

    Per-chunk ops are ~0.1-1 MB each: sharing one between OpenMP threads gains
    little on an idle machine and collapses when the cores are busy (spinning
    threads wait for descheduled ones: measured 25x slower on a loaded 2-core
    box, where one thread ran at the speed of a plain copy).
    """
    before = torch.get_num_threads()
    if before == n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


intra_op_threads = _intra_op_threads    # for callers whose tiny ops should not wake OpenMP either


def _compared_per_index(shape: tuple[int, ...], dim: int,
                        mask: torch.Tensor | None) -> torch.Tensor:
    """Compared elements at each index of ``dim`` (float64), from shape and rows only."""
    total_rows = shape[0] if mask is None else int(mask.sum().item())
    inner = math.prod(shape[1:])
    if dim == 0:
        if mask is None:
            return torch.full((shape[0],), float(inner), dtype=torch.float64)
        return mask.to(torch.float64) * inner
    per_index = total_rows * inner // shape[dim] if shape[dim] else 0
    return torch.full((shape[dim],), float(per_index), dtype=torch.float64)


def _clean_ratios(shape: tuple[int, ...], dim: int, mask: torch.Tensor | None, numel: int) -> tuple[float, ...]:
    """``_ratios`` of a comparison with nothing bad, without a tensor: 0.0 at each index of
    ``dim`` with compared elements, NaN (0 / 0) at one without (``_compared_per_index``)."""
    if dim == 0:
        inner = math.prod(shape[1:])
        compared = [inner] * shape[0] if mask is None else [inner if m else 0 for m in mask.tolist()]
        return tuple(0.0 if c else math.nan for c in compared)
    per_index = numel // shape[dim] if shape[dim] else 0
    return (0.0 if per_index else math.nan,) * shape[dim]


def _blocks(n: int) -> tuple[int, int]:
    """Block size (``ceil(n / MAP_CELLS)``, at least 1) and number of cells for ``n`` indices."""
    block = max(1, -(-n // MAP_CELLS))
    return block, -(-n // block)


def _sum_blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    """Sums of consecutive ``block``-sized runs along the last dim (the last run may be
    shorter), through a strided view: no copy of ``x``.  Bool counts as 0/1."""
    n = x.shape[-1]
    full = n // block
    sums = x.unfold(-1, block, block).sum(-1) if full else x[..., :0].sum(-1, keepdim=True)[..., :0]
    if n % block:
        sums = torch.cat([sums, x[..., full * block:].sum(-1, keepdim=True)], dim=-1)
    return sums


def _map_dims(named: dict[int, str], shape: tuple[int, ...]) -> tuple[int, int] | None:
    """The two dims of the 2-D map: the first two named, skipping size-1 dims while two remain."""
    dims = sorted(named)
    if len(dims) < 2:
        return None
    wide = [dim for dim in dims if shape[dim] > 1][:2]
    d0, d1 = sorted(wide + [dim for dim in dims if dim not in wide][:2 - len(wide)])
    return d0, d1


def _block_sizes(n: int, block: int) -> torch.Tensor:
    """Indices per cell: ``block`` each, the last cell what is left (float64)."""
    sizes = torch.full((-(-n // block),), float(block), dtype=torch.float64)
    if n % block:
        sizes[-1] = float(n % block)
    return sizes


def _map(walk: "_Walk", named: dict[int, str], shape: tuple[int, ...],
         mask: torch.Tensor | None) -> dict[str, Any] | None:
    """The blocked bad-ratio map of a finished walk, as plain JSON types (None when clean)."""
    if walk.map_dims is None or not walk.bad:
        return None
    d0, d1 = walk.map_dims
    (block0, rows0), (block1, cols1) = _blocks(shape[d0]), _blocks(shape[d1])
    # Compared elements per (i0, i1) are a product u[i0] * v[i1] * rest: only
    # dim 0 can be masked (``rows``), and d0 < d1, so only u can vary.
    if d0 == 0 and mask is not None:
        u_cells = _sum_blocks(mask, block0).to(torch.float64)
        rest = math.prod(n for k, n in enumerate(shape) if k not in (d0, d1))
    else:
        u_cells = _block_sizes(shape[d0], block0)
        rows = shape[0] if mask is None else int(mask.sum().item())
        rest = math.prod(n for k, n in enumerate(shape) if k not in (d0, d1))
        if d0 != 0:
            rest = rest // shape[0] * rows if shape[0] else 0
    compared = torch.outer(u_cells, _block_sizes(shape[d1], block1)) * float(rest)
    bad = walk.map_counts.view(rows0, cols1).to(torch.float64)
    ratio = bad / compared                           # 0/0 -> NaN: nothing compared there
    return {"axes": [named[d0], named[d1]], "size": [shape[d0], shape[d1]],
            "block": [block0, block1], "shape": list(ratio.shape), "ratio": ratio.tolist()}


def _ratios(bad: torch.Tensor, compared: torch.Tensor) -> tuple[float, ...]:
    ratio = bad.to(torch.float64) / compared        # 0/0 -> NaN: nothing compared there
    return tuple(ratio.tolist())


# --------------------------------------------------------------------------
# The public function
# --------------------------------------------------------------------------

def ratio_allclose(actual: torch.Tensor, expected: torch.Tensor, *, atol: float, rtol: float,
                   max_error_ratio: float, name: str = "output",
                   axes: Sequence[str | None] | None = None,
                   groups: Mapping[str, tuple[int, Any]] | None = None,
                   rows: Any = None, chunk_elems: int = 1 << 18,
                   slack: torch.Tensor | None = None, stored: torch.dtype | None = None,
                   atol_rms: float | None = None) -> Comparison:
    """Compare ``actual`` with ``expected``; see the module docstring for the semantics.

    axes:   one entry per dim, a name or None; localise by every named dim.
    groups: name -> (dim, labels), labels[i] the group (0..G-1) of index i of
            dim; a negative label leaves that index out of every group.
    rows:   bool mask over dim 0; only rows marked True are compared.
    slack:  per-element allowance added to ``atol + rtol*|e|`` (expected's shape, finite, >= 0).
    stored: the dtype ``actual`` was stored in (a key of ``ULP_DTYPES``): every element's bound
            admits at least half an ulp of it at ``|e|`` plus ``atol``, so the correct rounding of
            ``e`` (or of any value within ``atol / 2`` of it) is never bad.
    atol_rms: each row's atol is this fraction of the RMS of ``expected``'s row (its last dim),
            between ``atol / ATOL_RMS_FLOOR`` and ``atol`` (``row_atol``).
    """
    _validate_tensors(actual, expected)
    atol = _valid_tolerance("atol", atol)
    rtol = _valid_tolerance("rtol", rtol)
    max_error_ratio = _valid_tolerance("max_error_ratio", max_error_ratio, upper=1.0)
    if not isinstance(chunk_elems, int) or chunk_elems < 1:
        raise ValueError(f"chunk_elems must be an int >= 1, got {chunk_elems!r}")
    caller_ndim = actual.dim()
    shape = tuple(actual.shape)
    named = _valid_axes(axes, caller_ndim)
    group_specs = _valid_groups(groups, shape, set(named.values()))
    mask = _valid_rows(rows, shape)
    if slack is not None:
        if not isinstance(slack, torch.Tensor) or slack.shape != expected.shape or not slack.is_floating_point():
            raise ValueError(f"slack must be a floating tensor of shape {tuple(expected.shape)}")
        slack = slack.to(expected.device)
    if stored is not None and stored not in ULP_DTYPES:
        raise ValueError(f"stored must be one of {', '.join(map(str, ULP_DTYPES))}, got {stored!r}")
    if atol_rms is not None:
        atol_rms = _valid_tolerance("atol_rms", atol_rms)
        if atol_rms == 0:
            raise ValueError("atol_rms must be > 0 (None: atol not scaled), got 0")
    if caller_ndim == 0:
        actual, expected, shape = actual.reshape(1), expected.reshape(1), (1,)
        slack = None if slack is None else slack.reshape(1)
    atol_min = None
    if atol_rms is not None:
        # The per-row atol enters as slack over the smallest row's atol: the bound
        # max(lo + rtol|e|, half_ulp + lo) + (row - lo) is the row's own, term for term.
        per_row = row_atol(expected, atol, atol_rms)
        compared = per_row if mask is None or per_row.dim() == 0 else per_row[mask.to(per_row.device)]
        atol_min = float(compared.min()) if compared.numel() else atol
        extra = (per_row - atol_min).unsqueeze(-1).expand(shape)
        slack = extra if slack is None else slack + extra

    dtype = torch.float64 if torch.float64 in (actual.dtype, expected.dtype) else torch.float32
    runs = _runs(mask, shape[0])
    numel = sum(stop - start for start, stop in runs) * math.prod(shape[1:])
    layout = _Layout.plan(shape, chunk_elems)
    loc_dims = set(named) | {dim for dim, _ in group_specs.values()}
    walk = _Walk(layout, dtype, actual.dtype, expected.dtype, actual.device,
                 atol if atol_min is None else atol_min, rtol,
                 loc_dims, numel, caller_ndim, _map_dims(named, shape), slack, stored)
    if numel:
        with torch.no_grad(), _intra_op_threads(1):
            for start, stop in runs:
                for outer, j, m in layout.chunks(start, stop):
                    walk.add(actual, expected, outer, j, m)

    localisation: dict[str, tuple[float, ...]] = {}
    for dim, axis in named.items():
        if walk.counts:
            localisation[axis] = _ratios(walk.counts[dim], _compared_per_index(shape, dim, mask))
        else:                                   # nothing bad: 0 where compared, NaN where not
            localisation[axis] = _clean_ratios(shape, dim, mask, numel)
    for gname, (dim, labels) in group_specs.items():
        keep = labels >= 0
        size = int(labels.max().item()) + 1 if bool(keep.any()) else 0
        lab = labels[keep]
        counts = walk.counts[dim] if walk.counts else torch.zeros(shape[dim], dtype=torch.int64)
        bad = torch.bincount(lab, weights=counts[keep].to(torch.float64), minlength=size)
        cmp = torch.bincount(lab, weights=_compared_per_index(shape, dim, mask)[keep],
                             minlength=size)
        localisation[gname] = _ratios(bad, cmp)

    allowed = round(max_error_ratio * numel)
    nonfinite = walk.nonfinite_a + walk.nonfinite_e
    has_pair = walk.max_abs_at is not None
    return Comparison(
        name=name,
        passed=nonfinite == 0 and walk.bad <= allowed,
        numel=numel,
        bad_count=walk.bad,
        allowed_bad=allowed,
        atol=atol,
        rtol=rtol,
        max_error_ratio=max_error_ratio,
        nonfinite_actual=walk.nonfinite_a,
        nonfinite_expected=walk.nonfinite_e,
        max_abs_error=walk.max_abs if has_pair else math.nan,
        max_abs_index=walk.public(walk.max_abs_at),
        max_abs_allowed=walk.max_abs_allowed,
        max_rel_error=walk.max_rel if walk.max_rel_at is not None else math.nan,
        max_rel_index=walk.public(walk.max_rel_at),
        worst=tuple((walk.public(w[3]), w[4], w[5], w[6]) for w in walk.worst),
        first_bad=tuple(walk.public(i) for i in walk.first),
        localisation=localisation,
        map=_map(walk, named, shape, mask),
        stored_ulp=None if stored is None else str(stored).removeprefix("torch."),
        atol_rms=atol_rms,
        atol_min=atol_min,
    )


def row_atol(expected: torch.Tensor, atol: float, atol_rms: float, chunk_rows: int = 1 << 14) -> torch.Tensor:
    """Each row's atol for ``atol_rms``: ``atol_rms`` x the RMS of ``expected`` over its last dim,
    clamped to [atol / ATOL_RMS_FLOOR, atol]; shape ``expected.shape[:-1]`` (fp32 or fp64), on
    its device.  Rows are summed a slice of dim 0 at a time, so no full-size copy is made; a row
    with a NaN or Inf gets ``atol`` (the comparison fails on the non-finite element anyway)."""
    wide = torch.float64 if expected.dtype == torch.float64 else torch.float32
    e = expected.reshape(1) if expected.dim() == 0 else expected
    width = max(e.shape[-1], 1)
    out = torch.empty(e.shape[:-1], dtype=wide, device=e.device)
    with torch.no_grad():
        if e.dim() == 1:
            out.copy_(torch.linalg.vector_norm(e, dtype=wide))
        for start in range(0, e.shape[0] if e.dim() > 1 else 0, chunk_rows):
            torch.linalg.vector_norm(e[start:start + chunk_rows], dim=-1, dtype=wide, out=out[start:start + chunk_rows])
        out.div_(math.sqrt(width)).mul_(atol_rms)
        out.nan_to_num_(nan=atol, posinf=atol).clamp_(min=atol / ATOL_RMS_FLOOR, max=atol)
    return out
