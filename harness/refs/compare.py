"""`harness compare`: the same cases × N on several kernel refs, as the table engineers paste.

Rows are cases, columns are refs, a cell counts each label over the repeats
(``5/5 PASS`` or ``0/5 PASS, 5/5 FAIL_507018``).  The verdict per case sets the
first ref (the baseline: upstream, the last good fix point) against the last
one (the candidate) with the flake statistics of ``harness.flake``: a Fisher
exact test on the failure counts (``hunt_change``), plus the failure rate and
its interval on every ref.

A compare is a parent run with one child run per ref.  Its ``ComparePlan`` (refs by
sha, cases, repeats, seeds, how refs are prepared) is stored with the parent, and
``run_compare`` runs per ref only what its child runs lack: a new compare and
``compare --resume`` are the same loop.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Callable

from harness import stats
from harness.case import Case
from harness.commands.runner import failure_text
from harness.errors import UsageError
from harness.flake.changes import SIGNIFICANCE, HuntChange, decide_text, hunt_change
from harness.flake.hunt import HuntOptions, plan
from harness.flake.summary import HuntSummary, summarize_case
from harness.latency.across import latency_rows, undecided
from harness.latency.statistics import MIN_ROUNDS
from harness.document.table import Column, tabulate
from harness.commands.selection import deciding
from harness.outcomes import Outcome, Result
from harness.provenance import run_provenance
from harness.refs.git import Commit
from harness.refs.runner import PreparedRef, RefRunner, RefSetup
from harness.document import build_document
from harness.run.engine import Planned
from harness.run.options import ResumeOptions
from harness.store import Store
from harness.document.summary import summarize


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
    runs_to_decide: int | None = None    # flaky: runs per ref for 80% power at the observed rates (None: > the cap)
    failure: str | None = None           # a command failing on every run of every ref: what it printed

    @property
    def changed(self) -> bool:
        """Not ``unchanged``: what ``compare --changed`` shows (every row with one ref)."""
        return self.verdict not in (RefVerdict.UNCHANGED_CLEAN, RefVerdict.UNCHANGED_FAILING)

    def to_json(self) -> dict:
        """A row of a compare document's ``compare`` list (docs/json-schema.md)."""
        return {"case_id": self.case_id, "matrix": self.matrix, "cells": dict(self.cells),
                "flake": {name: s.to_json() for name, s in self.flake.items()},
                "verdict": self.verdict.describe() if self.verdict else "", "p_value": self.p_value,
                "runs_to_decide": self.runs_to_decide, "failure": self.failure}


def table(results: list[Result], ref_names: list[str]) -> list[CompareRow]:
    """One row per case id (in first-seen order): cells and flake summaries per ref, and the verdict.

    A cell counts the labels of the runs that were not skipped (``5/5 PASS``, ``0/5 PASS, 5/5
    FAIL_507018``; ``2 skipped`` when none ran, ``-`` when the case did not run on that ref).  A command
    case with a selected set of tests is judged by those tests only (``deciding``): no row of its own."""
    results = deciding(results)
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
        decide = None
        if verdict is RefVerdict.FLAKY:
            before, after = summaries[ref_names[0]], summaries[ref_names[-1]]
            decide = stats.runs_to_decide(before.failures / before.total, after.failures / after.total, SIGNIFICANCE)
        rows.append(CompareRow(case_id, next(iter(per_ref.values()))[0].matrix, cells, summaries, verdict, p,
                               decide, _failing_everywhere(per_ref, ref_names)))
    return rows


def _failing_everywhere(per_ref: dict[str, list[Result]], ref_names: list[str]) -> str | None:
    """What a command case printed when every run on every ref failed (``failure_text``; the first
    ref's first run): the table says only ``5/5 FAILED``, the text says why."""
    ran = [r for name in ref_names for r in per_ref.get(name, []) if r.outcome is not Outcome.SKIPPED]
    if not ran or not all(r.outcome.failed for r in ran) or any(not per_ref.get(name) for name in ref_names):
        return None
    return next((text for r in ran if (text := failure_text(r)) is not None), None)


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
    decide = decide_text(row.runs_to_decide) if row.verdict is RefVerdict.FLAKY else ""
    return (f"{word}: {first} {rate(row.flake[first])} -> {last} {rate(row.flake[last])}, "
            f"Fisher p = {row.p_value:.3g}" + (f"; {decide}" if decide else ""))


# -- running a compare ------------------------------------------------------------

@dataclass(frozen=True)
class ComparePlan:
    """What a compare runs, fixed when it starts; the parent run's ``extra["plan"]`` keeps it for ``--resume``."""

    setup: RefSetup
    refs: tuple[tuple[str, str], ...]          # (name, sha): the baseline first, the candidate last
    cases: tuple[Case, ...]
    repeat: int
    devices: tuple[str, ...]
    options: ResumeOptions = ResumeOptions()
    seeds: str = "fixed"
    hunt_seed: int = 0
    latency: dict | None = None                # {"threshold": t}: a latency compare in rounds (docs/latency.md)

    def planned(self) -> list[Planned]:
        """Every case ``repeat`` times, iteration-major.  The same list runs on every ref, so with
        fresh seeds repeat i has one seed on all of them (paired), and another seed per repeat."""
        hunt = HuntOptions(repeat=self.repeat, seeds=self.seeds, hunt_seed=self.hunt_seed)
        return [replace(p, bitwise=False) for p in plan(list(self.cases), hunt)]

    def to_dict(self) -> dict[str, Any]:
        return {"setup": self.setup.to_dict(), "refs": [list(r) for r in self.refs],
                "cases": [c.to_wire() for c in self.cases], "repeat": self.repeat, "devices": list(self.devices),
                "options": self.options.to_dict(), "seeds": self.seeds, "hunt_seed": self.hunt_seed,
                "latency": self.latency}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ComparePlan":
        return cls(setup=RefSetup.from_dict(data["setup"]), refs=tuple((n, sha) for n, sha in data["refs"]),
                   cases=tuple(Case.from_wire(c) for c in data["cases"]), repeat=int(data["repeat"]),
                   devices=tuple(data["devices"]), options=ResumeOptions.from_dict(data["options"], ResumeOptions()),
                   seeds=data["seeds"], hunt_seed=int(data["hunt_seed"]), latency=data.get("latency"))


def start(store: Store, plan: ComparePlan, commits: list[tuple[str, Commit]], *, command: list[str],
          parent_id: str | None = None) -> str:
    """Record the parent run of a new compare, with its plan; its id (``parent_id``: a latency bisect's step)."""
    return store.start_run(command=command, devices=list(plan.devices), kind="compare", parent_id=parent_id,
                           extra={"refs": [{"name": n, "sha": c.sha, "subject": c.subject} for n, c in commits],
                                  "repeat": plan.repeat, "cases": [c.case_id for c in plan.cases],
                                  "seeds": plan.seeds, "hunt_seed": plan.hunt_seed, "plan": plan.to_dict()})


def load(store: Store, run_id: str) -> ComparePlan:
    """The plan of stored compare ``run_id`` (``--resume``)."""
    run = store.run(run_id)
    if run is None or run["kind"] != "compare":
        raise UsageError(f"--resume {run_id}: no compare with that id in {store.path}")
    try:
        return ComparePlan.from_dict(run["extra"]["plan"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"--resume {run_id}: the compare did not record a plan that reads ({exc})") from None


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
    latency_threshold: float | None = None               # a latency compare's threshold
    latency_seeds: dict | None = None                    # a latency bisect step's carried noise (plan.latency)

    @property
    def rows(self) -> list[CompareRow]:
        return table(self.results, self.names)

    @property
    def latency_rows(self) -> list[dict] | None:
        """Per case and candidate ref, ``latency_verdict`` (a latency compare only)."""
        if self.latency_threshold is None:
            return None
        return latency_rows(self.results, self.names, self.latency_threshold, self.latency_seeds)

    def document(self, command: list[str]) -> dict:
        return build_document(
            self.results, started=self.started, devices=self.devices, command=command,
            provenance={"run": run_provenance(), "devices": self.device_info, "refs": self.refs},
            run_id=self.parent, kind="compare", compare=[r.to_json() for r in self.rows],
            refs=[{"name": r["name"], "sha": r["sha"], "subject": r["subject"], "build": r["build"]}
                  for r in self.refs], latency=self.latency_rows)


def compared(store: Store, parent: str, plan: ComparePlan) -> Compared:
    """An empty ``Compared`` for the stored compare ``parent``, for ``run_compare`` to fill."""
    return Compared(parent, [name for name, _ in plan.refs], list(plan.devices), store.run(parent)["started"],
                    latency_threshold=plan.latency["threshold"] if plan.latency else None,
                    latency_seeds=plan.latency.get("seeds") if plan.latency else None)


def run_compare(runner: RefRunner, store: Store, plan: ComparePlan, commits: list[tuple[str, Commit]],
                done: Compared, *, command: list[str],
                announce: Callable[[str, Commit, PreparedRef | None], None] | None = None,
                reporter: Callable[[str, int], object] | None = None) -> Compared:
    """Every planned repeat of every case on every ref (a ``RefRunner``), each ref a child run of the
    ``compare`` run ``done.parent``, into ``done`` as results come (so an interrupted compare
    still has what finished); the parent's summary holds the table.  What a ref's child runs
    already hold is not run again (``--resume``): only its missing repeats run, as a child run
    resumed from its first one, and a ref with none missing is not prepared (``announce`` gets
    None).  ``reporter(name, total)`` gives a context manager with ``started``/``finished`` (the
    terminal) for each ref.  A latency compare (``plan.latency``) runs the refs in rounds instead:
    repeat r of every case on each ref in turn (A, B, then B, A: an order effect cancels), each
    ref's workers fresh in every round (a worker's own speed would otherwise bias every round the
    same way), one child run per ref and round (docs/latency.md)."""
    parent, names = done.parent, done.names
    everything = plan.planned()
    have: dict[str, set] = {}
    prepared: dict[str, PreparedRef | None] = {}
    children_of: dict[str, list] = {}

    def prepare(name: str, commit: Commit) -> PreparedRef:
        if prepared.get(name) is None:
            prepared[name] = runner.prepare(name, commit)
            done.refs[:] = [r for r in done.refs if r.get("name") != name] + [prepared[name].provenance]
            if announce:
                announce(name, commit, prepared[name])
        return prepared[name]

    def visit(name: str, commit: Commit, todo_all: list[Planned]) -> None:
        if name not in have:        # first visit: what the store holds counts
            children = [c for c in store.children(parent) if c["kind"] == "compare-ref" and c["ref"] == name]
            children_of[name] = children
            stored = [r for c in children for r in store.results(c["run_id"])]
            done.results.extend(stored)
            for c in children:
                done.device_info.update(c["provenance"].get("devices", {}))
            have[name] = {(r.case_id, r.repeat) for r in stored}
        todo = [p for p in todo_all if (p.case.case_id, p.repeat) not in have[name]]
        if not todo:
            if name not in prepared and children_of[name]:      # nothing missing: the stored ref, unprepared
                prepared[name] = None
                done.refs.append(children_of[name][-1]["extra"]["ref"])
                if announce:
                    announce(name, commit, None)
            return
        ref = prepare(name, commit)
        shown = reporter(name, len(todo)) if reporter else None

        def finished(p: Planned, r: Result, shown=shown) -> None:
            done.results.append(r)          # as it comes: an interrupted ref still counts in the summary
            have[name].add((r.case_id, r.repeat))
            if shown is not None:
                shown.finished(r)

        with shown if shown is not None else contextlib.nullcontext():
            recorded = runner.run(
                ref, todo, kind="compare-ref", parent_id=parent, command=command,
                resumed_from=next((c["run_id"] for c in children_of[name] if not c["resumed_from"]), None),
                on_start=(lambda p, w: shown.started(p.case.case_id, str(w.device))) if shown else None,
                on_result=finished)
        done.device_info.update(recorded.provenance.get("devices", {}))

    try:
        if plan.latency is None:
            for name, commit in commits:
                visit(name, commit, everything)
                store.update_extra(parent, {"done": [*store.run(parent)["extra"].get("done", []), name]})
        else:
            pending = list(plan.cases)
            for r in range(plan.repeat):        # at most plan.repeat rounds; from MIN_ROUNDS on, only the undecided
                in_round = [Planned(i, c, r) for i, c in enumerate(pending)]
                for name, commit in (commits if r % 2 == 0 else commits[::-1]):
                    visit(name, commit, in_round)
                runner.new_round()
                if r + 1 >= MIN_ROUNDS:
                    pending = undecided(pending, done.results, names, plan.latency["threshold"],
                                        plan.latency.get("seeds"))
                if not pending:
                    break
    finally:
        rows = table(done.results, names) if done.results else []
        store.finish_run(parent, {**summarize(done.results),
                                  "compare": [{k: v for k, v in r.to_json().items()
                                               if k in ("case_id", "cells", "verdict", "p_value")} for r in rows],
                                  **({"latency": latency_rows(done.results, names, plan.latency["threshold"],
                                                              plan.latency.get("seeds"))}
                                     if plan.latency else {})})
    return done
