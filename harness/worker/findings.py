"""What the checks find in one launched case, as data (runs in the device worker).

Its own module because both the checks (``checks.py``) and the per-output comparators
(``comparators.py``, which ``checks`` calls) make findings.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.outcomes import Outcome


@dataclass(frozen=True)
class Finding:
    outcome: Outcome
    message: str                       # one line, names the buffer
    detail: str = ""                   # the multi-line comparison report, when there is one


@dataclass(frozen=True)
class Findings:
    """Everything the checks found in one case, most specific first; ``outcome`` is the first's."""

    outcome: Outcome
    items: tuple[Finding, ...]
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        if not self.items:
            return "all outputs, caches and guard bands match"
        return self.items[0].message

    @property
    def report(self) -> str:
        parts = []
        for f in self.items:
            parts.append(f"[{f.outcome.value}] {f.message}")
            if f.detail:
                parts.append(f.detail)
        return "\n".join(parts)
