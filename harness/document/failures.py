"""The failures a report lists below its table: one entry per case and label, and the
results' warnings.  Pure data: no rendering, no torch.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

from harness.document.table import label_details
from harness.outcomes import Result

MAX_LISTED_LOGS = 8           # other logs of a group named before "and N more"


def failing(results: Iterable[Result]) -> list[Result]:
    return [r for r in results if r.outcome.failed]


def _runs(values: list[int]) -> str:
    """``0-4, 7``: sorted integers as ranges."""
    values = sorted(set(values))
    spans: list[list[int]] = []
    for v in values:
        if spans and v == spans[-1][1] + 1:
            spans[-1][1] = v
        else:
            spans.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


@dataclass(frozen=True)
class FailureGroup:
    """The failing results of one case with one label (repeats, devices, refs), in document order.

    ``first`` is the representative: its summary, report, figures and log are shown; the
    others are counted, placed (``where``) and their logs named (``other_logs``)."""

    case_id: str
    label: str
    results: tuple[Result, ...]

    @property
    def first(self) -> Result:
        return self.results[0]

    @property
    def count(self) -> int:
        return len(self.results)

    @property
    def times(self) -> str:
        """``×8``, or ``""`` for a single failure."""
        return f"×{self.count}" if self.count > 1 else ""

    @property
    def detail(self) -> str:
        """The failures' key detail over the group (``out 12.5%-25.0% bad``): ``label_details``."""
        return label_details(self.results).get(self.label, "")

    @property
    def same_summary(self) -> bool:
        return len({r.summary for r in self.results}) == 1

    @property
    def repeats(self) -> str:
        """``0-4, 7``: the group's repeat indices as ranges."""
        return _runs([r.repeat for r in self.results])

    @property
    def where(self) -> str:
        """``npu:0, ref fix, repeat 0, seed 7`` / ``npu:0, npu:1, refs up, fix, repeats 0-4, seed 1234``."""
        rs = self.results
        devices = list(dict.fromkeys(r.device for r in rs if r.device))
        refs = list(dict.fromkeys(r.ref for r in rs if r.ref))
        seeds = list(dict.fromkeys(r.seed for r in rs if r.seed is not None))
        parts = list(devices)
        if refs:
            parts.append(("ref " if len(refs) == 1 else "refs ") + ", ".join(refs))
        parts.append(("repeat " if len({r.repeat for r in rs}) == 1 else "repeats ") + self.repeats)
        if len(seeds) == 1:
            parts.append(f"seed {seeds[0]}")
        elif len(seeds) <= 4 and seeds:
            parts.append("seeds " + ", ".join(map(str, seeds)))
        elif seeds:
            parts.append(f"{len(seeds)} seeds")
        return ", ".join(parts)

    @property
    def log(self) -> str | None:
        """The representative's log, else the first log any of the group has."""
        return self.first.log or next((r.log for r in self.results if r.log), None)

    @property
    def other_logs(self) -> str:
        """The group's other logs, compactly: file names when they share the representative's
        folder (``in /x/logs: a.log, b.log``), at most ``MAX_LISTED_LOGS`` and how many more."""
        main = self.log
        others = [log for log in dict.fromkeys(r.log for r in self.results if r.log) if log != main]
        if not others:
            return ""
        folder = os.path.dirname(main or "")
        shown = others[:MAX_LISTED_LOGS]
        if folder and all(os.path.dirname(log) == folder for log in shown):
            text = "in the same folder: " + ", ".join(os.path.basename(log) for log in shown)
        else:
            text = ", ".join(shown)
        return text + (f" and {len(others) - len(shown)} more" if len(others) > len(shown) else "")


def result_warnings(results: Iterable[Result]) -> list[tuple[str, str]]:
    """``(case id, warning)`` for every result's ``warnings``, once each (a hunt's repeats say it
    once), in the order the results came."""
    return list(dict.fromkeys((r.case_id, w) for r in results for w in r.warnings))


def failure_groups(results: Iterable[Result]) -> list[FailureGroup]:
    """The failing results grouped by (case id, label), in order of each group's first failure."""
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in failing(results):
        groups.setdefault((r.case_id, r.label), []).append(r)
    return [FailureGroup(case_id, label, tuple(rs)) for (case_id, label), rs in groups.items()]
