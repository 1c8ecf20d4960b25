"""Which results decide, once a command case's ``--test`` / ``-k`` selection reached its JUnit tests.

A command case's tests are known only once it has run (its JUnit file).  So the selection
(``TestSelection``, harness/casefiles/commandspec.py) travels with the case (``CommandSpec.tests``,
stored with the planned case), the runner keeps
the tests it selects as results ``case::test`` and notes on the command's own result how many
of how many it kept (``metrics.command.selection``).  ``deciding`` is what bisect, compare and
flake judge by: a command case whose JUnit was read and that carries a selection is judged by
its selected tests only (the command's own status says the whole suite failed, which a test
elsewhere in the suite may have caused); without a readable JUnit, by the command's own result,
as before.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from harness.outcomes import Result

SHOWN_TESTS = 5          # test ids listed in a "matched no test" message


def _selection(result: Result) -> dict | None:
    command = (result.metrics or {}).get("command")
    return command.get("selection") if isinstance(command, dict) else None


def is_test_result(result: Result) -> bool:
    """A JUnit test of a command case (``case::test``), not a case of its own."""
    return "suite" in (result.metrics or {}) and "test" in (result.metrics or {})


def deciding(results: Iterable[Result]) -> list[Result]:
    """The results that decide good/bad and the statistics: all, less the own result of each
    command case that carries a selection and whose JUnit was read (its selected tests decide)."""
    out = []
    for r in results:
        sel = _selection(r)
        if sel is not None and sel.get("of") is not None:
            continue
        out.append(r)
    return out


def failing_ids(results: Iterable[Result]) -> list[str]:
    """The ids of the deciding results that failed, tests rather than their suite: a command's own
    failed result is left out when tests of it were read (they name what failed)."""
    results = list(results)
    suites_with_tests = {r.metrics["suite"] for r in results if is_test_result(r)}
    return sorted({r.case_id for r in deciding(results) if r.outcome.failed
                   and not (r.case_id in suites_with_tests and not is_test_result(r))})


@dataclass(frozen=True)
class Unmatched:
    """A command case whose JUnit was read and whose selection kept none of its tests."""

    case_id: str
    selection: str
    available: tuple[str, ...]       # the first few test ids it has

    def line(self) -> str:
        shown = ", ".join(self.available) if self.available else "none"
        return f"{self.selection}: no test of {self.case_id} matched (its tests include: {shown})"


def unmatched(results: Iterable[Result]) -> list[Unmatched]:
    """Each command case (once) whose selection kept none of the tests its JUnit held."""
    seen: dict[str, Unmatched] = {}
    for r in results:
        sel = _selection(r)
        if sel is None or sel.get("of") is None or sel.get("matched") or r.case_id in seen:
            continue
        seen[r.case_id] = Unmatched(r.case_id, sel.get("describe", ""), tuple(sel.get("sample", ())))
    return list(seen.values())


def any_matched(results: Sequence[Result]) -> bool:
    """Some command case with a selection kept a test (or none carried a selection with a readable JUnit)."""
    selected = [_selection(r) for r in results]
    read = [s for s in selected if s is not None and s.get("of") is not None]
    return not read or any(s.get("matched") for s in read)


__all__ = ["SHOWN_TESTS", "Unmatched", "any_matched", "deciding", "failing_ids", "is_test_result", "unmatched"]
