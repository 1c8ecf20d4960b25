"""One audit: the matrix once as it is, then once per operator over the cases it applies to.

Every run shares one engine (warm workers) and one golden cache, so each case's golden
is computed once for the whole audit: mutants change the kernel, never the inputs.
The unmutated run is stored as kind ``audit``, each mutant's as ``audit-mutant`` under it.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.audit.coverage import Condition, coverage
from harness.audit.kill import MutantVerdict, Score, score, verdict
from harness.audit.operators import DEFAULT_DELTA, Operator, applicable, mutated
from harness.audit.sensitivity import Sensitivity, find_sensitivity
from harness.case import Case
from harness.outcomes import Outcome, Result
from harness.run.engine import Engine, Planned, RunOptions
from harness.run.session import execute
from harness.store import Store


@dataclass(frozen=True)
class Audit:
    run_id: str                               # the unmutated run; mutant runs are its children
    baseline: tuple[Result, ...]
    verdicts: tuple[MutantVerdict, ...]
    coverage: tuple[Condition, ...]
    delta: float
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
                "head_perturbed_delta": self.delta}


def run_audit(cases: Sequence[Case], operators: Sequence[Operator], options: RunOptions, store: Store, *,
              command: list[str] | None = None, delta: float = DEFAULT_DELTA, sensitivity: bool = False,
              on_run: Callable[[str, int], None] | None = None,
              on_result: Callable[[Planned, Result], None] | None = None) -> Audit:
    """``on_run(name, cases)`` before each run ("unmutated" first); ``on_result`` after each case."""
    engine = Engine(options)
    try:
        if on_run:
            on_run("unmutated", len(cases))
        planned = [Planned(i, c) for i, c in enumerate(cases)]
        base = execute(planned, options, store, kind="audit", command=command, engine=engine, on_result=on_result)
        baseline = {r.case_id: r for r in base.results}
        verdicts = []
        for operator in operators:
            chosen = applicable(cases, operator)
            results: dict[str, Result] = {}
            if chosen:
                if on_run:
                    on_run(operator.name, len(chosen))
                runs = [Planned(i, mutated(c, operator, delta)) for i, c in enumerate(chosen)]
                recorded = execute(runs, options, store, kind="audit-mutant", command=command,
                                   parent_id=base.run_id, extra={"mutant": operator.name}, engine=engine,
                                   on_result=on_result)
                results = {r.case_id: r for r in recorded.results}
            verdicts.append(verdict(operator, chosen, baseline, results))
        found = None
        if sensitivity:
            def run(mutants: list[Case]) -> dict[str, Result]:
                if on_run:
                    on_run("sensitivity step", len(mutants))
                recorded = execute([Planned(i, c) for i, c in enumerate(mutants)], options, store,
                                   kind="audit-mutant", command=command, parent_id=base.run_id,
                                   extra={"mutant": "head_perturbed", "sensitivity": True}, engine=engine,
                                   on_result=on_result)
                return {r.case_id: r for r in recorded.results}
            found = find_sensitivity(cases, baseline, run)
    finally:
        engine.close()
    return Audit(base.run_id, tuple(base.results), tuple(verdicts), coverage(cases), delta, found)
