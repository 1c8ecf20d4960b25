"""Sensitivity: per output of each op, the smallest relative perturbation of one head (and of one
smaller block) that the matrix's tolerances detect, found by bisection on delta.

Each step runs the cases of every op still being searched once, each op's cases with
that op's current delta (the deltas travel in the case env, so one run serves every
op's bisection); the outputs are searched one after another (an op's first outputs, then
the second outputs of the ops that have two), since one run holds each case once.  The
first step is at ``HIGH``; an op not detected there is done (its
tolerance admits even that).  The next steps are geometric bisections between the
largest delta seen missed (``LOW`` before any) and the smallest seen detected, so
after ``steps`` steps the threshold is known to within a factor of
``(HIGH / LOW) ** (1 / 2**steps)``.

The head-shape search is also where ``head_perturbed`` gets its delta when the user
gives none: each op's results at the smallest delta it found detected are that
operator's results (``Sensitivity.results``), no run repeated.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from harness.audit.operators import HEAD_PERTURBED, by_name, mutated, value_outputs
from harness.case import Case
from harness.formats import pct
from harness.outcomes import Result

LOW, HIGH = 1e-4, 1.0
SHAPES = {"head": "per-head errors", "block": "errors in a quarter of one head (a sixteenth of a row without heads)"}
FULL_STEPS = 7          # --sensitivity: the threshold to within a factor of 1.08, 8 runs per shape
QUICK_STEPS = 3         # head_perturbed's delta without --delta: within a factor of 3.2, 4 runs


@dataclass(frozen=True)
class Sensitivity:
    op: str
    output: str
    shape: str                      # head | block
    detected: float | None          # the smallest delta found detected; None: not even HIGH
    missed: float                   # the largest delta found missed (0: none was)
    # The results of the op's cases at ``detected`` (at HIGH when None): head_perturbed's verdict.
    results: Mapping[str, Result] = field(default_factory=dict, compare=False, repr=False)

    @property
    def delta(self) -> float:
        """The delta ``results`` were run at."""
        return HIGH if self.detected is None else self.detected

    @property
    def sentence(self) -> str:
        if self.detected is None:
            return f"this matrix misses {SHAPES[self.shape]} on `{self.output}` ({self.op}) up to {pct(HIGH)}"
        if self.missed == 0:
            return f"this matrix detects {SHAPES[self.shape]} on `{self.output}` ({self.op}) down to {pct(self.detected)}"
        return f"this matrix misses {SHAPES[self.shape]} below {pct(self.detected)} on `{self.output}` ({self.op})"

    def to_json(self) -> dict:
        return {"op": self.op, "output": self.output, "shape": self.shape, "detected": self.detected,
                "missed": self.missed, "text": self.sentence}


def find_sensitivity(cases: Sequence[Case], baseline: Mapping[str, Result],
                     run: Callable[[list[Case]], Mapping[str, Result]], steps: int = FULL_STEPS,
                     shapes: Sequence[str] = tuple(SHAPES), every_output: bool = False) -> tuple[Sensitivity, ...]:
    """``run``: the results of mutated cases by id.  Cases the unmutated kernel failed are left out.
    ``every_output``: every output of each op (else its first, which head_perturbed scales)."""
    live = [c for c in cases if c.case_id in baseline and baseline[c.case_id].outcome.passed]
    found = []
    for shape in shapes:
        for index in range(max((len(value_outputs(c)) for c in live), default=0) if every_output else 1):
            found += _search(live, shape, index, run, steps)
    return tuple(found)


def _search(live: Sequence[Case], shape: str, index: int, run: Callable[[list[Case]], Mapping[str, Result]],
            steps: int) -> list[Sensitivity]:
    """The bisection for output ``index`` of every op that has one (the first output: no env of its own)."""
    # an op's outputs (a spec op's floating ones) from its first case: its cases share one table's names
    outputs: dict[str, tuple[str, ...]] = {}
    for c in live:
        outputs.setdefault(c.op, value_outputs(c))
    ops = [op for op in dict.fromkeys(c.op for c in live) if len(outputs[op]) > index]
    live = [c for c in live if c.op in ops]
    output = {op: outputs[op][index] for op in ops}
    named = {op: output[op] if index else None for op in ops}
    low = dict.fromkeys(ops, 0.0)                               # largest delta seen missed
    high: dict[str, float | None] = dict.fromkeys(ops, None)   # smallest delta seen detected
    kept: dict[str, dict[str, Result]] = {op: {} for op in ops}
    trial = dict.fromkeys(ops, HIGH)
    searching = list(ops)
    for _ in range(steps + 1):                                  # HIGH, then the bisection
        if not searching:
            break
        results = run([mutated(c, by_name()[HEAD_PERTURBED], trial[c.op], shape, named[c.op])
                       for c in live if c.op in searching])
        for op in searching:
            mine = {c.case_id: results[c.case_id] for c in live if c.op == op and c.case_id in results}
            if any(r.outcome.failed for r in mine.values()):
                high[op], kept[op] = trial[op], mine
            else:
                low[op] = trial[op]
                if high[op] is None:        # not detected at HIGH: nothing to bisect
                    kept[op] = mine
        searching = [op for op in searching if high[op] is not None]
        for op in searching:
            trial[op] = math.sqrt(max(low[op], LOW) * high[op])
    return [Sensitivity(op, output[op], shape, high[op], low[op], kept[op]) for op in ops]
