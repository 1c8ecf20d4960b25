"""The engineers' table of results: one row per case, one column per ref, device or a single column.

Cells count labels and carry the key detail of the failures they count
(``0/5 PASS, 5/5 CONTRACT (out 99.8% bad)``); a near-tie is a pass with a note
(``5/5 PASS (4 clean, 1 near-tie)``).  ``harness compare`` builds its table here
(``tabulate``), the report renderers theirs from a document (``outcome_table``).  Pure data:
no rendering, no torch.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from harness.document import results_of
from harness.formats import pct
from harness.outcomes import Outcome, Result

PASS = Outcome.PASS.value
NEAR_TIE = Outcome.NEAR_TIE.value
SKIPPED = Outcome.SKIPPED.value

DETAIL_CHARS = 48             # a fallback detail (a summary's first clause) is cut here


def label_counts(results: Iterable[Result]) -> dict[str, int]:
    """Results per display label: PASS, then NEAR_TIE, then by count (largest first), then by name."""
    return _ordered(Counter(r.label for r in results))


def _ordered(counts: Mapping[str, int]) -> dict[str, int]:
    items = sorted(counts.items(), key=lambda kv: (kv[0] != PASS, kv[0] != NEAR_TIE, -kv[1], kv[0]))
    return dict(items)


def passed_text(passed: int, near_tie: int) -> str:
    """``10 passed`` / ``10 passed (9 clean, 1 near-tie)``: a near-tie is a pass, noted."""
    return f"{passed} passed" + (f" ({passed - near_tie} clean, {near_tie} near-tie)" if near_tie else "")


def totals_text(results: Iterable[Result]) -> str:
    """``5 passed, 11 failed, 1 skipped``; near-ties are passes, noted: ``10 passed (9 clean, 1 near-tie)``."""
    results = list(results)
    near_tie = sum(r.outcome is Outcome.NEAR_TIE for r in results)
    return (f"{passed_text(sum(r.outcome.passed for r in results), near_tie)}, "
            f"{sum(r.outcome.failed for r in results)} failed, "
            f"{sum(r.outcome is Outcome.SKIPPED for r in results)} skipped")


def cell_text(counts: Mapping[str, int], details: Mapping[str, str] | None = None) -> str:
    """``5/5 PASS`` / ``0/5 PASS, 5/5 FAIL_507018 (ACL_ERROR_RT_AICORE_EXCEPTION)``.

    PASS first, counting near-ties (``5/5 PASS (4 clean, 1 near-tie)``), then the other
    labels by count, each followed by its entry in ``details`` when there is one."""
    total = sum(counts.values())
    if not total:
        return "-"
    details = details or {}
    near_tie = counts.get(NEAR_TIE, 0)
    passed = counts.get(PASS, 0) + near_tie
    parts = [f"{passed}/{total} {PASS}" + (f" ({passed - near_tie} clean, {near_tie} near-tie)" if near_tie else "")]
    parts += [f"{n}/{total} {label}" + (f" ({details[label]})" if details.get(label) else "")
              for label, n in _ordered(counts).items() if label not in (PASS, NEAR_TIE) and n]
    return ", ".join(parts)


# -- the detail of a failure -------------------------------------------------------

@dataclass(frozen=True)
class Detail:
    """The most telling short phrase of one failure: ``out 99.8% bad``, ``SIGSEGV``.

    ``ratio``: the bad fraction of the buffer named by ``subject``, when there is one, so the
    repeats of a cell can show a range of it."""

    subject: str
    ratio: float | None = None

    @property
    def text(self) -> str:
        return f"{self.subject} {pct(self.ratio)} bad" if self.ratio is not None else self.subject


_CHECKED = (Outcome.MISMATCH, Outcome.CONTRACT, Outcome.UNWRITTEN, Outcome.NONFINITE, Outcome.OOB_WRITE)
_FAULTS = (Outcome.DEVICE_FAULT, Outcome.ORCH_ERROR, Outcome.OOM, Outcome.CRASH, Outcome.ENV_ERROR)
_GUARD = re.compile(r"^(?P<buf>.+?): guard band overwritten: (?P<n>\d+) elements (?P<where>before the start|past the end)")
_TIMEOUT = re.compile(r"timeout_s=(?P<t>[^;\s]+)")


def _clause(summary: str) -> str:
    """A summary's first clause (up to its second ``:`` or first ``;``), cut at ``DETAIL_CHARS``."""
    text = " ".join(summary.split())
    head, sep, rest = text.partition(": ")
    text = head + (sep + re.split(r"[:;]", rest, maxsplit=1)[0] if sep else "")
    text = text.split(";", 1)[0].strip()
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS - 3].rstrip() + "..."


def _worst_buffer(metrics: Mapping[str, Any]) -> Detail | None:
    compare = metrics.get("compare")
    failed = [(m.get("bad_ratio"), str(name)) for name, m in (compare.items() if isinstance(compare, Mapping) else ())
              if isinstance(m, Mapping) and m.get("passed") is False and isinstance(m.get("bad_ratio"), (int, float))]
    if not failed:
        return None
    ratio, name = max(failed, key=lambda f: f[0])
    return Detail(name, float(ratio))


def detail(result: Result) -> Detail | None:
    """What a cell says about one failure, from the fields the result already carries.

    Check failures: the failing buffer with the largest bad fraction (``out 99.8% bad``);
    a guard band: the buffer and where (``cache 64 before the start``); an argmax flip:
    the rows; faults: the reporting core (``fftsplus aicore core 9``), else the root
    cause, else the code's name (``ACL_ERROR_RT_AICORE_EXCEPTION``), the signal of a
    crash, the bytes an OOM asked for; a hang: its timeout and what the log showed; a build
    error: its exit status.  Else the summary's first clause; None for passes and skips."""
    o, m, summary = result.outcome, result.metrics if isinstance(result.metrics, Mapping) else {}, result.summary or ""
    if not o.failed:
        return None
    if o in _CHECKED:
        if o is Outcome.OOB_WRITE and (g := _GUARD.match(summary)):
            return Detail(f"{g['buf']} {g['n']} {g['where']}")
        worst = _worst_buffer(m)
        if worst is not None:
            return worst
        argmax = m.get("argmax")
        if isinstance(argmax, Mapping) and argmax.get("flips"):
            return Detail(f"argmax flipped in {argmax['flips']} of {argmax.get('compared_rows', '?')} rows")
    elif o in _FAULTS:
        if o is Outcome.CRASH and isinstance(result.code, str):
            return Detail(result.code)
        fields = m.get("fields")
        # What faulted, as PR tables say it ("AICore 507018"): the core that reported it, else the
        # root cause, else the printed code's name (the label already carries the code itself).
        if isinstance(fields, Mapping) and fields.get("core_kind"):
            core = f" core {fields['core_id']}" if fields.get("core_id") is not None else ""
            return Detail(f"{fields['core_kind']}{core}")
        if m.get("cause"):
            return Detail(str(m["cause"]))
        if m.get("fault_name"):
            return Detail(str(m["fault_name"]))
        if o is Outcome.OOM and isinstance(fields, Mapping) and isinstance(fields.get("requested_bytes"), int):
            return Detail(f"{fields['requested_bytes'] / 2 ** 20:.4g} MiB requested")
    elif o is Outcome.HANG:
        t = _TIMEOUT.search(summary)
        if t:
            shows = summary.partition("log shows ")[2]
            return Detail(f"killed after {t['t']} s" + (f", log shows {shows}" if shows else ""))
    elif o is Outcome.BUILD_ERROR:
        build = m.get("build")
        if isinstance(build, Mapping) and build.get("timed_out"):
            return Detail("build timed out")
        if isinstance(build, Mapping) and build.get("returncode") is not None:
            return Detail(f"build exit {build['returncode']}")
    return Detail(_clause(summary)) if summary.strip() else None


def details_text(found: Sequence[Detail]) -> str:
    """The phrase of several failures of one label: one detail, its bad fractions as a range
    (``out 12.5%-25.0% bad``); two different ones with their counts; more: the most common
    and how many others."""
    if not found:
        return ""
    by_subject: dict[str, list[Detail]] = {}
    for d in found:
        by_subject.setdefault(d.subject, []).append(d)
    ranked = sorted(by_subject.values(), key=len, reverse=True)      # stable: first seen wins a tie

    def one(group: list[Detail]) -> str:
        ratios = sorted(d.ratio for d in group if d.ratio is not None)
        if not ratios or ratios[0] == ratios[-1]:
            return group[0].text
        return f"{group[0].subject} {pct(ratios[0])}-{pct(ratios[-1])} bad"

    if len(ranked) == 1:
        return one(ranked[0])
    if len(ranked) == 2:
        return ", ".join(f"{one(g)} ×{len(g)}" for g in ranked)
    others = sum(len(g) for g in ranked[1:])
    return f"{one(ranked[0])} ×{len(ranked[0])}, +{others} other"


def label_details(results: Iterable[Result]) -> dict[str, str]:
    """Per failing label, the phrase of its failures (``details_text``)."""
    found: dict[str, list[Detail]] = {}
    for r in results:
        d = detail(r)
        if d is not None:
            found.setdefault(r.label, []).append(d)
    return {label: details_text(ds) for label, ds in found.items()}


@dataclass(frozen=True)
class Column:
    key: str          # the ref name, the device, or "" for the single column
    title: str        # ``upstream 68889bc``, ``npu:6``, ``result``


@dataclass(frozen=True)
class Cell:
    counts: dict[str, int]            # per label, ordered as in ``cell_text``
    failed: int                       # results whose outcome failed
    skipped: int
    details: dict[str, str] = field(default_factory=dict)    # per failing label: ``label_details``

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def text(self) -> str:
        return cell_text(self.counts, self.details)

    @property
    def ran_text(self) -> str:
        """``text`` without the skipped results: ``2 skipped`` when nothing else ran, ``-`` when empty."""
        ran = {label: n for label, n in self.counts.items() if label != SKIPPED}
        if not ran:
            return f"{self.skipped} skipped" if self.skipped else "-"
        return cell_text(ran, self.details)

    @property
    def status(self) -> str:
        """``fail`` (any failure), ``pass`` (all passed), ``skip`` (nothing ran), ``mixed``, ``empty``."""
        if not self.total:
            return "empty"
        if self.failed:
            return "fail"
        if self.skipped == self.total:
            return "skip"
        return "pass" if not self.skipped else "mixed"


EMPTY_CELL = Cell({}, 0, 0)


@dataclass(frozen=True)
class Row:
    case_id: str
    matrix: str
    cells: dict[str, Cell]            # column key -> cell (absent: the case did not run there)

    def cell(self, key: str) -> Cell:
        return self.cells.get(key, EMPTY_CELL)

    @property
    def labels(self) -> list[str]:
        """Every label in the row, for filters."""
        return sorted({label for c in self.cells.values() for label in c.counts})

    @property
    def differs(self) -> bool:
        """The columns disagree (a different set of labels somewhere): what compare looks for."""
        return len({tuple(sorted(c.counts)) for c in self.cells.values()}) > 1


@dataclass(frozen=True)
class OutcomeTable:
    by: str                                       # "ref", "device" or "single"
    columns: tuple[Column, ...]
    matrices: tuple[tuple[str, tuple[Row, ...]], ...]   # in order of first appearance

    @property
    def rows(self) -> list[Row]:
        return [row for _, rows in self.matrices for row in rows]


def _columns(results: list[Result], ref_columns: Sequence[Column]) -> tuple[str, list[Column]]:
    if ref_columns or any(r.ref for r in results):
        columns, seen = [], set()
        for column in ref_columns:
            if column.key not in seen:
                seen.add(column.key)
                columns.append(column)
        for r in results:
            key = r.ref or ""
            if key not in seen:
                seen.add(key)
                columns.append(Column(key, key or "(no ref)"))
        return "ref", columns
    devices = list(dict.fromkeys(r.device for r in results))
    if len(devices) > 1:
        return "device", [Column(d, d or "(no device)") for d in devices]
    return "single", [Column("", devices[0] if devices and devices[0] else "result")]


def tabulate(results: Iterable[Result], ref_columns: Sequence[Column] = ()) -> OutcomeTable:
    """The table of ``results``.

    Rows: case ids, grouped by matrix, both in order of first appearance.
    Columns: ``ref_columns``, then any other ``ref`` a result names; without refs,
    the devices when there are several, else one column.  A cell counts labels over
    every result of that case in that column (repeats, and devices when the columns
    are refs), with the detail of its failures (``label_details``).
    """
    results = list(results)
    by, columns = _columns(results, ref_columns)
    counts: dict[str, dict[str, Counter]] = {}
    failed: Counter = Counter()
    skipped: Counter = Counter()
    matrix_of: dict[str, str] = {}
    failures: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        key = (r.ref or "") if by == "ref" else (r.device if by == "device" else "")
        counts.setdefault(r.case_id, {}).setdefault(key, Counter())[r.label] += 1
        if r.outcome.failed:
            failures.setdefault((r.case_id, key), []).append(r)
        matrix_of.setdefault(r.case_id, r.matrix or r.case_id.split("[", 1)[0])
        failed[r.case_id, key] += r.outcome.failed
        skipped[r.case_id, key] += r.outcome is Outcome.SKIPPED
    grouped: dict[str, list[Row]] = {}
    for case_id, per_column in counts.items():
        cells = {key: Cell(_ordered(c), failed[case_id, key], skipped[case_id, key],
                           label_details(failures.get((case_id, key), ())))
                 for key, c in per_column.items()}
        grouped.setdefault(matrix_of[case_id], []).append(Row(case_id, matrix_of[case_id], cells))
    return OutcomeTable(by, tuple(columns), tuple((m, tuple(rows)) for m, rows in grouped.items()))


# -- a document's table: its refs first among the columns --------------------------

def short_sha(sha: Any) -> str:
    return str(sha or "")[:7]


def ref_title(ref: Mapping[str, Any]) -> str:
    """``upstream 68889bc``: how a ref heads a column."""
    sha = short_sha(ref.get("sha"))
    name = str(ref.get("name") or sha or "?")
    return f"{name} {sha}" if sha and sha != name else name


def outcome_table(source: Mapping[str, Any] | Iterable[Result]) -> OutcomeTable:
    """The engineers' table of a document (its ``refs`` first among the columns) or of bare results."""
    if not isinstance(source, Mapping):
        return tabulate(source)
    refs = [r for r in source.get("refs") or [] if isinstance(r, Mapping)]
    return tabulate(results_of(source), [Column(str(r.get("name") or short_sha(r.get("sha"))), ref_title(r))
                                         for r in refs])
