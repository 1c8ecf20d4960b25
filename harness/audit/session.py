"""One audit: the matrix once as it is, then once per operator over the cases it applies to.

Every run shares one engine (warm workers) and one golden cache, so each case's golden
is computed once for the whole audit: mutants change the kernel, never the inputs.
The unmutated run is stored as kind ``audit``, each mutant's as ``audit-mutant`` under it.
``head_perturbed`` without ``--delta`` runs as the head-shape sensitivity search
(``sensitivity.py``): its verdict is each op's results at the smallest delta found detected.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.audit.coverage import Condition, coverage
from harness.audit.kill import MutantVerdict, Score, score, verdict
from harness.audit.operators import HEAD_PERTURBED, Operator, applicable, mutated, value_outputs
from harness.audit.sensitivity import FULL_STEPS, QUICK_STEPS, SHAPES, Sensitivity, find_sensitivity
from harness.case import Case
from harness.outcomes import Outcome, Result
from harness.run.engine import Engine, Planned, RunOptions
from harness.run.session import execute
from harness.store import Store


@dataclass(frozen=True)
class HeadDelta:
    """The delta ``head_perturbed`` ran at, per op, and where it came from."""

    source: str                     # "sensitivity": the search's smallest detected delta | "--delta"
    by_op: Mapping[str, float]

    @property
    def delta(self) -> float | None:
        """The largest delta any op ran at (None: no op ran it)."""
        return max(self.by_op.values(), default=None)

    def to_json(self) -> dict:
        return {"source": self.source, "delta": self.delta, "by_op": dict(self.by_op)}


@dataclass(frozen=True)
class Audit:
    run_id: str                               # the unmutated run; mutant runs are its children
    baseline: tuple[Result, ...]
    verdicts: tuple[MutantVerdict, ...]
    coverage: tuple[Condition, ...]
    head_delta: HeadDelta | None = None       # None: head_perturbed was not run
    sensitivity: tuple[Sensitivity, ...] | None = None     # None: not asked for

    @property
    def score(self) -> Score:
        return score(self.verdicts)

    @property
    def harness_broke(self) -> bool:
        broke = Outcome.HARNESS_ERROR.value
        return any(r.outcome is Outcome.HARNESS_ERROR for r in self.baseline) or \
            any(label == broke for v in self.verdicts for label in v.outcomes.values())

    def document(self) -> dict[str, Any]:
        s = self.score
        return {"kind": "audit", "run_id": self.run_id,
                "score": s.value, "killed": s.killed, "applicable": s.applicable,
                "mutants": [v.to_json() for v in self.verdicts],
                "baseline": {r.case_id: r.label for r in self.baseline},
                "coverage": [c.to_json() for c in self.coverage],
                "sensitivity": None if self.sensitivity is None else [x.to_json() for x in self.sensitivity],
                "head_perturbed_delta": None if self.head_delta is None else self.head_delta.to_json()}


def run_audit(cases: Sequence[Case], operators: Sequence[Operator], options: RunOptions, store: Store, *,
              command: list[str] | None = None, delta: float | None = None, sensitivity: bool = False,
              on_run: Callable[[str, int], None] | None = None,
              on_result: Callable[[Planned, Result], None] | None = None) -> Audit:
    """``delta``: head_perturbed's; None: each op's from the head-shape sensitivity search.
    ``on_run(name, cases)`` before each run ("unmutated" first); ``on_result`` after each case."""
    engine = Engine(options)
    try:
        if on_run:
            on_run("unmutated", len(cases))
        planned = [Planned(i, c) for i, c in enumerate(cases)]
        base = execute(planned, options, store, kind="audit", command=command, engine=engine, on_result=on_result)
        baseline = {r.case_id: r for r in base.results}

        def run(name: str, mutants: list[Case], extra: dict) -> dict[str, Result]:
            if on_run:
                on_run(name, len(mutants))
            recorded = execute([Planned(i, c) for i, c in enumerate(mutants)], options, store,
                               kind="audit-mutant", command=command, parent_id=base.run_id, extra=extra,
                               engine=engine, on_result=on_result)
            return {r.case_id: r for r in recorded.results}

        def search(chosen: Sequence[Case], steps: int, shapes: Sequence[str]) -> tuple[Sensitivity, ...]:
            # --sensitivity: every output; head_perturbed's own delta needs only the first
            return find_sensitivity(chosen, baseline, lambda mutants: run(
                "head_perturbed (sensitivity step)", mutants, {"mutant": "head_perturbed", "sensitivity": True}),
                steps=steps, shapes=shapes, every_output=sensitivity)

        found: tuple[Sensitivity, ...] | None = None
        head_delta = None
        verdicts = []
        for operator in operators:
            chosen = applicable(cases, operator)
            results: dict[str, Result] = {}
            if operator.name == HEAD_PERTURBED and delta is None:
                # The search's runs are this operator's runs: each op at its smallest detected delta.
                searched = search(chosen, FULL_STEPS, tuple(SHAPES)) if sensitivity else \
                    search(chosen, QUICK_STEPS, ("head",))
                found = searched if sensitivity else None
                first = {c.op: value_outputs(c)[0] for c in chosen}
                heads = [x for x in searched if x.shape == "head" and x.output == first.get(x.op)]
                results = {i: r for x in heads for i, r in x.results.items()}
                head_delta = HeadDelta("sensitivity", {x.op: x.delta for x in heads})
            elif chosen:
                results = run(operator.name, [mutated(c, operator, delta) for c in chosen],
                              {"mutant": operator.name})
                if operator.name == HEAD_PERTURBED:
                    head_delta = HeadDelta("--delta", {op: delta for op in dict.fromkeys(c.op for c in chosen)})
            verdicts.append(verdict(operator, chosen, baseline, results))
        if sensitivity and found is None:
            found = search(cases, FULL_STEPS, tuple(SHAPES))
    finally:
        engine.close()
    return Audit(base.run_id, tuple(base.results), tuple(verdicts), coverage(cases), head_delta, found)
