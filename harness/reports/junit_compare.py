"""What a compare's JUnit counts as failed: the candidate's problems only.

A compare document (``kind: compare`` with its ``compare`` rows) sets the last ref,
the candidate, against the first, the baseline.  CI reads a red testcase as "this
change is broken", so only the candidate's failing runs are failures: the runs of a
case it regressed, one that is flaky on it, one still failing on it.  A failure on
any other ref (the baseline failures the candidate fixes, a ref in between) is shown
on a passing testcase: ``ref_*`` properties and ``system-out`` text that name
the ref, its role and the case's verdict.  The exit status of ``harness compare``
follows the same rule.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from harness.document import kind_of
from harness.outcomes import Result


@dataclass(frozen=True)
class CompareRoles:
    """The refs' roles in a compare document, and its rows by case id."""

    baseline: str
    candidate: str
    rows: Mapping[str, Mapping[str, Any]]

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> "CompareRoles | None":
        """None for any other document (every failure is then a failure)."""
        if kind_of(doc) != "compare" or not doc.get("compare") or not doc.get("refs"):
            return None
        names = [ref["name"] for ref in doc["refs"]]
        return cls(names[0], names[-1], {row["case_id"]: row for row in doc["compare"]})

    def role(self, ref: str | None) -> str:
        return "candidate" if ref == self.candidate else "baseline" if ref == self.baseline else "other ref"

    def fails(self, r: Result) -> bool:
        """A failing run of the candidate; a run of another ref never fails the report."""
        return r.outcome.failed and r.ref == self.candidate

    def properties(self, r: Result) -> list[tuple[str, Any]]:
        props: list[tuple[str, Any]] = [("ref_role", self.role(r.ref))]
        row = self.rows.get(r.case_id)
        if row is not None and row.get("verdict"):
            props += [("ref_verdict", row["verdict"]), ("ref_p_value", row.get("p_value"))]
        return props

    def note(self, r: Result) -> str:
        """Why a failing run of another ref is not a failure here (a testcase's ``system-out``)."""
        row = self.rows.get(r.case_id) or {}
        cells = row.get("cells") or {}
        verdict = row.get("verdict") or "no verdict"
        return (f"{r.label} on the {self.role(r.ref)} {r.ref}: not a failure of this compare, which fails only "
                f"the candidate {self.candidate}'s runs. Verdict for {r.case_id}: {verdict} "
                f"({self.baseline} {cells.get(self.baseline, '-')} -> {self.candidate} "
                f"{cells.get(self.candidate, '-')})")
