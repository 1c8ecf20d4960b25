"""Which tests of a command case count: ``-k`` reaching JUnit tests (``command_case_match``), ``--test``
patterns (``TestSelection``), and the bisect conclusion's failing tests per commit."""
from __future__ import annotations

from harness.bisect.driver import BisectState
from harness.bisect.search import FlakyBisect
from harness.casefiles.expression import command_case_match
from harness.casefiles.commandspec import TestSelection
from harness.commands.selection import failing_ids
from harness.outcomes import Outcome, Result
from harness.refs.git import Commit
from harness.reports.bisect_text import failing_lines


def test_k_reaches_tests_only_with_a_word_in_no_case_id():
    ids = ["repro", "serving-suite"]
    match = command_case_match("stateless", ids)
    assert match("serving-suite").tests and not match("serving-suite").whole
    match = command_case_match("repro", ids)         # a case's name: -k selects cases, as it always did
    assert match("repro").whole and not match("serving-suite").tests
    match = command_case_match("repro or stateless", ids)
    assert match("repro").whole and match("serving-suite").tests
    match = command_case_match("not serving and stateless", ids)   # 'serving' is in the id: can never hold
    assert not match("serving-suite").tests and not match("serving-suite").whole


def test_a_test_pattern_is_an_exact_id_or_a_glob_on_the_full_or_bare_id():
    sel = TestSelection(("suite[seed=0]::tests/t.py::test_a",))      # brackets: a glob would read a set
    assert sel.matches("suite[seed=0]", "tests/t.py::test_a") and not sel.matches("suite[seed=1]", "tests/t.py::test_a")
    assert TestSelection(("*stateless*",)).matches("s", "tests/t.py::test_stateless")
    assert TestSelection(("tests/t.py::test_a",)).matches("any", "tests/t.py::test_a")
    assert not TestSelection(("*stateless*",), expr="slug").matches("s", "tests/t.py::test_stateless")


def _test(case_id: str, outcome: Outcome) -> Result:
    suite, test = case_id.split("::", 1)
    return Result(case_id=case_id, outcome=outcome, metrics={"suite": suite, "test": test})


def _state(n: int = 3) -> BisectState:
    commits = [Commit(sha=f"{i:040x}", subject=f"c{i}", author_date="2024-01-01", author="a") for i in range(n + 1)]
    return BisectState(commits, FlakyBisect(n))


def test_the_conclusion_lists_failing_tests_and_warns_when_culprit_and_bad_differ():
    state = _state()
    suite = Result(case_id="s", outcome=Outcome.FAILED, metrics={"command": {"tests": 2}})
    other, tracked = _test("s::t::other", Outcome.FAILED), _test("s::t::tracked", Outcome.FAILED)
    state.record(3, [suite, other, tracked], "r1")
    assert failing_ids([suite, other, tracked]) == ["s::t::other", "s::t::tracked"]     # not the suite itself
    state.record(1, [Result(case_id="s", outcome=Outcome.PASS), _test("s::t::other", Outcome.PASS)], "r2")
    for _ in range(12):
        state.record(2, [suite, other, _test("s::t::tracked", Outcome.PASS)], "r")
        state.record(1, [Result(case_id="s", outcome=Outcome.PASS)], "r")
    report = state.report()
    assert report["culprit"]["index"] == 2
    assert report["failing"] == {"culprit": ["s::t::other"], "bad": ["s::t::other", "s::t::tracked"],
                                 "culprit_only": [], "bad_only": ["s::t::tracked"]}
    lines = failing_lines(report)
    assert lines[-1].startswith("warning: bad fails tests that the culprit does not: only at bad: s::t::tracked")


def test_test_is_refused_with_resume(tmp_path, capsys):
    from harness.cli import main
    for argv in (["bisect", "--resume", "X", "--test", "a"], ["compare", "--resume", "X", "--test", "a"],
                 ["flake", "--resume", "X", "--test", "a"]):
        assert main([*argv, "--store", str(tmp_path / "s.sqlite")]) == 2, argv
        assert "--test does not apply to --resume" in capsys.readouterr().err, argv


def test_test_is_refused_with_flake_compare(tmp_path, capsys):
    from harness.cli import main
    assert main(["flake", "--compare", "A", "B", "--test", "a", "--store", str(tmp_path / "s.sqlite")]) == 2
    assert "--test does not apply to --compare" in capsys.readouterr().err
