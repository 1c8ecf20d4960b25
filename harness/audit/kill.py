"""The kill matrix: which case killed which mutant, the score, and why each survivor survived.

A mutant is killed by a case when the unmutated kernel passed that case and the mutant
fails it (a case the unmutated kernel already fails, or skips, can kill nothing; a
``HARNESS_ERROR`` is the harness breaking, never a kill).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.audit.coverage import has_negative_slot, has_valid_slot
from harness.audit.operators import Operator, target_output, target_rows
from harness.case import Case
from harness.outcomes import Outcome, Result


@dataclass(frozen=True)
class Kill:
    case_id: str
    label: str                # the mutant's outcome there (MISMATCH, OOB_WRITE, ...)


@dataclass(frozen=True)
class MutantVerdict:
    """One operator over the matrix."""

    name: str
    bug: str
    cases: tuple[str, ...]          # the cases it applies to (and ran on)
    killed_by: tuple[Kill, ...]
    outcomes: Mapping[str, str]     # case id -> the mutant's label there
    reason: str                     # why it survived ("" when killed or not applicable)

    @property
    def applicable(self) -> bool:
        return bool(self.cases)

    @property
    def killed(self) -> bool:
        return bool(self.killed_by)

    def to_json(self) -> dict:
        return {"name": self.name, "bug": self.bug, "applicable": self.applicable, "killed": self.killed,
                "killed_by": [k.case_id for k in self.killed_by],
                "killing_outcomes": {k.case_id: k.label for k in self.killed_by},
                "cases": list(self.cases), "outcomes": dict(self.outcomes), "reason": self.reason or None}


def verdict(operator: Operator, cases: Sequence[Case], baseline: Mapping[str, Result],
            results: Mapping[str, Result]) -> MutantVerdict:
    """``cases``: those ``operator`` applies to; ``results``: the mutant's, by case id."""
    ids = tuple(c.case_id for c in cases)
    kills = tuple(Kill(i, results[i].label) for i in ids
                  if i in results and i in baseline and baseline[i].outcome.passed and results[i].outcome.failed
                  and results[i].outcome not in (Outcome.HARNESS_ERROR, Outcome.ENV_ERROR))   # not the check's doing
    outcomes = {i: results[i].label for i in ids if i in results}
    reason = "" if kills or not ids else survivor_reason(operator, cases, baseline)
    return MutantVerdict(operator.name, operator.bug, ids, kills, outcomes, reason)


def survivor_reason(operator: Operator, cases: Sequence[Case], baseline: Mapping[str, Result]) -> str:
    """Why no case killed ``operator``, in words, most specific first."""
    passing = [c for c in cases if c.case_id in baseline and baseline[c.case_id].outcome.passed]
    if not passing:
        return f"the unmutated kernel already fails or skips all {len(cases)} case(s) it applies to"
    if operator.needs_negative_slot and not any(has_negative_slot(c) for c in passing):
        return "no case has a slot < 0"
    if operator.needs_valid_slot and not any(has_valid_slot(c) for c in passing):
        return "no case has a row with a slot >= 0"
    if operator.needs_two_rows and all(target_rows(c, operator) < 2 for c in passing):
        return f"no case's `{target_output(passing[0], operator)}` has more than one row"
    if operator.perturbs_value:
        case = passing[0]
        name = target_output(case, operator)
        tol = case.tolerance_for(name)
        scaled = f" scaled to {tol.atol_rms:g} x row RMS" if tol.atol_rms is not None else ""
        return (f"the tolerance on `{name}` (atol {tol.atol:g}{scaled}, rtol {tol.rtol:g}, max_error_ratio "
                f"{tol.max_error_ratio:g}) admits it")
    return f"all {len(passing)} passing case(s) it applies to still pass with it"


@dataclass(frozen=True)
class Score:
    killed: int
    applicable: int

    @property
    def value(self) -> float:
        """Killed / applicable mutants; 1.0 when none applies (nothing to be blind to)."""
        return self.killed / self.applicable if self.applicable else 1.0


def score(verdicts: Sequence[MutantVerdict]) -> Score:
    live = [v for v in verdicts if v.applicable]
    return Score(sum(v.killed for v in live), len(live))
