"""Sensitivity: per op's first output, the smallest relative perturbation of one head (and of one
smaller block) that the matrix's tolerances detect, found by bisection on delta.

Each step runs every case of the matrix once, each op's cases with that op's current
delta (the deltas travel in the case env, so one run serves every op's bisection).
The search is geometric between ``LOW`` and ``HIGH``: after ``steps`` steps the
threshold is known to a factor of ``(HIGH / LOW) ** (1 / 2**steps)``.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from harness.audit.operators import BY_NAME, mutated
from harness.case import Case
from harness.formats import pct
from harness.ops import OPS
from harness.outcomes import Result

LOW, HIGH = 1e-4, 1.0
SHAPES = {"head": "per-head errors", "block": "errors in a quarter of one head (a sixteenth of a row without heads)"}


@dataclass(frozen=True)
class Sensitivity:
    op: str
    output: str
    shape: str                      # head | block
    detected: float | None          # the smallest delta found detected; None: not even HIGH
    missed: float                   # the largest delta found missed (0: LOW was detected)

    @property
    def sentence(self) -> str:
        if self.detected is None:
            return f"this matrix misses {SHAPES[self.shape]} on `{self.output}` ({self.op}) up to {pct(HIGH)}"
        if self.missed == 0:
            return f"this matrix detects {SHAPES[self.shape]} on `{self.output}` ({self.op}) down to {pct(LOW)}"
        return f"this matrix misses {SHAPES[self.shape]} below {pct(self.detected)} on `{self.output}` ({self.op})"

    def to_json(self) -> dict:
        return {"op": self.op, "output": self.output, "shape": self.shape, "detected": self.detected,
                "missed": self.missed, "text": self.sentence}


def find_sensitivity(cases: Sequence[Case], baseline: Mapping[str, Result],
                     run: Callable[[list[Case]], Mapping[str, Result]], steps: int = 6) -> tuple[Sensitivity, ...]:
    """``run``: the results of mutated cases by id.  Cases the unmutated kernel failed are left out."""
    live = [c for c in cases if c.case_id in baseline and baseline[c.case_id].outcome.passed]
    ops = list(dict.fromkeys(c.op for c in live))
    found = []
    for shape in SHAPES:
        low = dict.fromkeys(ops, 0.0)               # largest delta seen missed
        high: dict[str, float | None] = dict.fromkeys(ops, None)   # smallest delta seen detected
        trial = dict.fromkeys(ops, HIGH)
        for step in range(steps + 2):               # HIGH, LOW, then the bisection
            results = run([mutated(c, BY_NAME["head_perturbed"], trial[c.op], shape) for c in live])
            for op in ops:
                seen = any(results[c.case_id].outcome.failed for c in live if c.op == op and c.case_id in results)
                if seen:
                    high[op] = trial[op]
                else:
                    low[op] = trial[op]
            for op in ops:
                if high[op] is None:                # not detected at HIGH: nothing to bisect
                    trial[op] = HIGH
                elif step == 0:
                    trial[op] = LOW
                else:
                    trial[op] = math.sqrt(max(low[op], LOW) * high[op])
        found += [Sensitivity(op, OPS[op].outputs[0].name, shape, high[op], low[op] if high[op] else HIGH)
                  for op in ops]
    return tuple(found)
