"""The engineers' table of results: one row per case, one column per ref, device or a single column.

Cells count labels (``0/5 PASS, 5/5 FAIL_507018``).  ``harness compare`` builds its
table here; the report renderers build theirs from a document through
``harness.reports.document.outcome_table``.  Pure data: no rendering, no torch.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from harness.outcomes import Outcome, Result

PASS = Outcome.PASS.value
SKIPPED = Outcome.SKIPPED.value


def label_counts(results: Iterable[Result]) -> dict[str, int]:
    """Results per display label: PASS first, then by count (largest first), then by name."""
    return _ordered(Counter(r.label for r in results))


def _ordered(counts: Mapping[str, int]) -> dict[str, int]:
    items = sorted(counts.items(), key=lambda kv: (kv[0] != PASS, -kv[1], kv[0]))
    return dict(items)


def cell_text(counts: Mapping[str, int]) -> str:
    """``5/5 PASS`` / ``0/5 PASS, 5/5 FAIL_507018``: PASS always first, then the rest by count."""
    total = sum(counts.values())
    if not total:
        return "-"
    parts = [f"{counts.get(PASS, 0)}/{total} {PASS}"]
    parts += [f"{n}/{total} {label}" for label, n in _ordered(counts).items() if label != PASS and n]
    return ", ".join(parts)


@dataclass(frozen=True)
class Column:
    key: str          # the ref name, the device, or "" for the single column
    title: str        # ``upstream 68889bc``, ``npu:6``, ``result``


@dataclass(frozen=True)
class Cell:
    counts: dict[str, int]            # per label, ordered as in ``cell_text``
    failed: int                       # results whose outcome failed
    skipped: int

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def text(self) -> str:
        return cell_text(self.counts)

    @property
    def ran_text(self) -> str:
        """``text`` without the skipped results: ``2 skipped`` when nothing else ran, ``-`` when empty."""
        ran = {label: n for label, n in self.counts.items() if label != SKIPPED}
        if not ran:
            return f"{self.skipped} skipped" if self.skipped else "-"
        return cell_text(ran)

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
    are refs).
    """
    results = list(results)
    by, columns = _columns(results, ref_columns)
    counts: dict[str, dict[str, Counter]] = {}
    failed: Counter = Counter()
    skipped: Counter = Counter()
    matrix_of: dict[str, str] = {}
    for r in results:
        key = (r.ref or "") if by == "ref" else (r.device if by == "device" else "")
        counts.setdefault(r.case_id, {}).setdefault(key, Counter())[r.label] += 1
        matrix_of.setdefault(r.case_id, r.matrix or r.case_id.split("[", 1)[0])
        failed[r.case_id, key] += r.outcome.failed
        skipped[r.case_id, key] += r.outcome is Outcome.SKIPPED
    grouped: dict[str, list[Row]] = {}
    for case_id, per_column in counts.items():
        cells = {key: Cell(_ordered(c), failed[case_id, key], skipped[case_id, key])
                 for key, c in per_column.items()}
        grouped.setdefault(matrix_of[case_id], []).append(Row(case_id, matrix_of[case_id], cells))
    return OutcomeTable(by, tuple(columns), tuple((m, tuple(rows)) for m, rows in grouped.items()))
