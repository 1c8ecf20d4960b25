"""`harness compare`: the same cases × N on several kernel refs, as the table engineers paste.

Rows are cases, columns are refs, a cell counts each label over the repeats
(``5/5 PASS`` or ``0/5 PASS, 5/5 FAIL_507018``).  The verdict per case sets the
first ref (the baseline: upstream, the last good fix point) against the last
one (the candidate) with the flake statistics of ``harness.flake``: a Fisher
exact test on the failure counts (``hunt_change``), plus the failure rate and
its interval on every ref.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Callable

from harness.flake.changes import SIGNIFICANCE, HuntChange, hunt_change
from harness.flake.hunt import HuntOptions, plan
from harness.flake.summary import HuntSummary, summarize_case
from harness.outcome_table import Column, tabulate
from harness.outcomes import Result
from harness.provenance import run_provenance
from harness.report_document import build_document
from harness.summary import summarize


class RefVerdict(Enum):
    """The candidate (the last ref) against the baseline (the first) for one case."""

    FIXED = "fixed"
    IMPROVED = "improved"
    REGRESSED = "regressed"
    FLAKY = "flaky"
    UNCHANGED_CLEAN = "unchanged_clean"
    UNCHANGED_FAILING = "unchanged_failing"
    CHANGED = "changed"
    TOO_FEW_RUNS = "too_few_runs"
    NO_RUNS = "no_runs"

    def describe(self) -> str:
        """The word the table, the reports and ``--json`` show."""
        return _REF_VERDICT_WORDS[self]


_REF_VERDICT_WORDS = {
    RefVerdict.FIXED: "fixed", RefVerdict.IMPROVED: "improved", RefVerdict.REGRESSED: "regressed",
    RefVerdict.FLAKY: "flaky", RefVerdict.UNCHANGED_CLEAN: "unchanged (clean)",
    RefVerdict.UNCHANGED_FAILING: "unchanged (failing)", RefVerdict.CHANGED: "changed (failing differently)",
    RefVerdict.TOO_FEW_RUNS: "too few runs to tell", RefVerdict.NO_RUNS: "no runs",
}


def ref_verdict(before: HuntSummary, after: HuntSummary,
                alpha: float = SIGNIFICANCE) -> tuple[RefVerdict, float]:
    """The candidate (``after``) against the baseline (``before``), and the Fisher p-value.
    ``hunt_change`` decides what the Fisher test can; the rest is told apart here."""
    fa, na, fb, nb = before.failures, before.total, after.failures, after.total
    if na == 0 or nb == 0:
        return RefVerdict.NO_RUNS, 1.0
    change, p = hunt_change(before, after, alpha)
    if change is HuntChange.CLEAN_IN_BOTH:
        return RefVerdict.UNCHANGED_CLEAN, p
    if change is HuntChange.FIXED:
        return (RefVerdict.FIXED if fb == 0 else RefVerdict.IMPROVED), p
    if change is HuntChange.REGRESSED:
        return RefVerdict.REGRESSED, p
    if 0 < fa < na or 0 < fb < nb:
        return RefVerdict.FLAKY, p
    if fa == na and fb == nb:
        same = before.hard_failures.keys() == after.hard_failures.keys()
        return (RefVerdict.UNCHANGED_FAILING if same else RefVerdict.CHANGED), p
    return RefVerdict.TOO_FEW_RUNS, p


@dataclass(frozen=True)
class CompareRow:
    """One case of the table: a cell and a hunt summary per ref, and the verdict (None with one ref)."""

    case_id: str
    matrix: str
    cells: dict[str, str]
    flake: dict[str, HuntSummary]
    verdict: RefVerdict | None
    p_value: float

    def to_json(self) -> dict:
        """A row of a compare document's ``compare`` list (docs/json-schema.md)."""
        return {"case_id": self.case_id, "matrix": self.matrix, "cells": dict(self.cells),
                "flake": {name: s.to_json() for name, s in self.flake.items()},
                "verdict": self.verdict.describe() if self.verdict else "", "p_value": self.p_value}


def table(results: list[Result], ref_names: list[str]) -> list[CompareRow]:
    """One row per case id (in first-seen order): cells and flake summaries per ref, and the verdict.

    A cell counts the labels of the runs that were not skipped (``5/5 PASS``, ``0/5 PASS, 5/5
    FAIL_507018``; ``2 skipped`` when none ran, ``-`` when the case did not run on that ref)."""
    grid = {row.case_id: row for row in tabulate(results, [Column(name, name) for name in ref_names]).rows}
    by_case: dict[str, dict[str, list[Result]]] = {}
    for r in results:
        by_case.setdefault(r.case_id, {}).setdefault(r.ref or "", []).append(r)
    rows = []
    for case_id, per_ref in by_case.items():
        summaries = {name: summarize_case(per_ref.get(name, [])) for name in ref_names}
        verdict, p = (ref_verdict(summaries[ref_names[0]], summaries[ref_names[-1]]) if len(ref_names) > 1
                      else (None, 1.0))
        cells = {name: grid[case_id].cell(name).ran_text for name in ref_names}
        rows.append(CompareRow(case_id, next(iter(per_ref.values()))[0].matrix, cells, summaries, verdict, p))
    return rows


def verdict_detail(row: CompareRow, ref_names: list[str]) -> str:
    """``fixed: upstream 100% (95% CI 48-100%) -> fix 0% (<= 45%), Fisher p = 0.0079``."""
    def rate(s: HuntSummary) -> str:
        if s.total == 0:
            return "no runs"
        if s.failures == 0:
            return f"0% (<= {100 * s.upper_one_sided:.0f}%)"
        lo, hi = s.clopper_pearson
        return f"{100 * s.rate:.0f}% (95% CI {100 * lo:.0f}-{100 * hi:.0f}%)"
    first, last = ref_names[0], ref_names[-1]
    word = row.verdict.describe() if row.verdict else ""
    return (f"{word}: {first} {rate(row.flake[first])} -> {last} {rate(row.flake[last])}, "
            f"Fisher p = {row.p_value:.3g}")


# -- running a compare ------------------------------------------------------------

@dataclass
class Compared:
    """A finished (or interrupted) compare: its parent run, every ref's results and provenance."""

    parent: str
    names: list[str]
    devices: list[str]
    started: float
    results: list[Result] = field(default_factory=list)
    refs: list[dict] = field(default_factory=list)          # each ref's provenance (sha, subject, build, env)
    device_info: dict = field(default_factory=dict)

    @property
    def rows(self) -> list[CompareRow]:
        return table(self.results, self.names)

    def document(self, command: list[str]) -> dict:
        return build_document(
            self.results, started=self.started, devices=self.devices, command=command,
            provenance={"run": run_provenance(), "devices": self.device_info, "refs": self.refs},
            run_id=self.parent, kind="compare", compare=[r.to_json() for r in self.rows],
            refs=[{"name": r["name"], "sha": r["sha"], "subject": r["subject"], "build": r["build"]}
                  for r in self.refs])


def run_compare(runner, store, cases: list, commits: list[tuple[str, object]], repeat: int, *,
                command: list[str], devices: list[str], announce: Callable | None = None,
                reporter: Callable[[str, int], object] | None = None) -> Compared:
    """Every case ``repeat`` times on every ref (a ``RefRunner``), each ref a child run of one
    ``compare`` run; the parent's summary holds the table.  ``reporter(name, total)`` gives a
    context manager with ``started``/``finished`` (the terminal) for each ref."""
    names = [name for name, _ in commits]
    parent = store.start_run(command=command, devices=devices, kind="compare",
                             extra={"refs": [{"name": n, "sha": c.sha, "subject": c.subject} for n, c in commits],
                                    "repeat": repeat, "cases": [c.case_id for c in cases]})
    done = Compared(parent, names, devices, time.time())
    planned = [replace(p, bitwise=False) for p in plan(cases, HuntOptions(repeat=repeat))]
    try:
        for name, commit in commits:
            prepared = runner.prepare(name, commit)
            done.refs.append(prepared.provenance)
            if announce:
                announce(name, commit, prepared)
            shown = reporter(name, len(planned)) if reporter else None
            with shown if shown is not None else contextlib.nullcontext():
                recorded = runner.run(
                    prepared, planned, kind="compare-ref", parent_id=parent, command=command,
                    on_start=(lambda p, w: shown.started(p.case.case_id, str(w.device))) if shown else None,
                    on_result=(lambda p, r: shown.finished(r)) if shown else None)
            done.results.extend(recorded.results)
            done.device_info.update(recorded.provenance.get("devices", {}))
            store.update_extra(parent, {"done": [*store.run(parent)["extra"].get("done", []), name]})
    finally:
        rows = table(done.results, names) if done.results else []
        store.finish_run(parent, {**summarize(done.results),
                                  "compare": [{k: v for k, v in r.to_json().items()
                                               if k in ("case_id", "cells", "verdict", "p_value")} for r in rows]})
    return done
