"""Two hunts of the same cases side by side (``harness flake --compare``): did the rate change?

A Fisher exact test on the failure counts decides; ``HuntChange`` names what it
says.  ``harness compare`` (across refs) builds its own verdict on this one.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Mapping

from harness import stats
from harness.flake.summary import HuntSummary

SIGNIFICANCE = 0.05


class HuntChange(Enum):
    """What two hunts of one case say about its failure rate."""

    FIXED = "fixed"
    REGRESSED = "regressed"
    CLEAN_IN_BOTH = "clean_in_both"
    NO_EVIDENCE = "no_evidence"

    def describe(self) -> str:
        """The word reports and ``--json`` show."""
        return _HUNT_CHANGE_WORDS[self]


_HUNT_CHANGE_WORDS = {HuntChange.FIXED: "fixed", HuntChange.REGRESSED: "regressed",
                      HuntChange.CLEAN_IN_BOTH: "clean in both", HuntChange.NO_EVIDENCE: "no evidence either way"}


def hunt_change(before: HuntSummary, after: HuntSummary, alpha: float = SIGNIFICANCE) -> tuple[HuntChange, float]:
    """The change from ``before`` to ``after``, and the Fisher p-value (1.0 when a side has no runs)."""
    fa, na, fb, nb = before.failures, before.total, after.failures, after.total
    if na == 0 or nb == 0:
        return HuntChange.NO_EVIDENCE, 1.0
    p = stats.fisher_exact(fa, na, fb, nb)
    if fa == 0 and fb == 0:
        return HuntChange.CLEAN_IN_BOTH, p
    if p < alpha:
        return (HuntChange.FIXED if fb / nb < fa / na else HuntChange.REGRESSED), p
    return HuntChange.NO_EVIDENCE, p


def decide_text(runs_to_decide: int | None) -> str:
    """What would decide a rate that moved without significance (``stats.runs_to_decide`` at the
    observed rates): ``16 runs per ref would decide it (80% power at these rates)``."""
    if runs_to_decide is None:
        return f"more than {stats.MAX_DECIDE_RUNS} runs per ref would be needed to decide it at these rates"
    return f"{runs_to_decide} runs per ref would decide it ({100 * stats.POWER:.0f}% power at these rates)"


@dataclass(frozen=True)
class Side:
    """One hunt's failures of a case."""

    failures: int
    runs: int
    rate: float | None

    def to_json(self) -> dict:
        return {"failures": self.failures, "runs": self.runs, "rate": self.rate}


@dataclass(frozen=True)
class CaseChange:
    case_id: str
    before: Side
    after: Side
    p_value: float
    change: HuntChange

    def to_json(self) -> dict:
        """One row of the ``flake --compare --json`` document."""
        return {"case_id": self.case_id, "before": self.before.to_json(), "after": self.after.to_json(),
                "p_value": self.p_value, "verdict": self.change.describe()}


def hunt_changes(before: Mapping[str, HuntSummary], after: Mapping[str, HuntSummary],
                 alpha: float = SIGNIFICANCE) -> list[CaseChange]:
    """Per case in both hunts (sorted): the rates, the Fisher p-value and the change (cases in one only are left out)."""
    rows = []
    for case_id in sorted(set(before) & set(after)):
        a, b = before[case_id], after[case_id]
        change, p = hunt_change(a, b, alpha)
        rows.append(CaseChange(case_id, Side(a.failures, a.total, a.rate), Side(b.failures, b.total, b.rate), p, change))
    return rows
