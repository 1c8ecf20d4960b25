"""One command case, start to results (``harness.commands.runner.run_case``), with real short commands."""
from __future__ import annotations

import os
import textwrap
from dataclasses import replace

from harness.casefiles import load_matrix
from harness.commands.runner import Context, run_case
from harness.devices import Device
from harness.outcomes import Outcome

JUNIT = """<testsuites><testsuite name="pytest">
<testcase classname="tests.test_x" name="test_ok" time="0.1"/>
<testcase classname="tests.test_x" name="test_fault" time="0.2"><failure message="RuntimeError: error code is 507018">trace</failure></testcase>
<testcase classname="tests.test_x" name="test_wrong" time="0.3"><failure message="assert 1 == 2">E assert 1 == 2</failure></testcase>
</testsuite></testsuites>
"""


def _cases(tmp_path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text))
    return load_matrix(path)


def _ctx(tmp_path, case, env=None, worktree=None) -> Context:
    return Context(device=Device("npu", 6), repeat=0, log_path=tmp_path / "logs" / f"{case.case_id}.log",
                   scratch=tmp_path / "scratch" / case.case_id, base_env=env or dict(os.environ), worktree=worktree)


def test_junit_tests_become_results_of_their_own_classified(tmp_path):
    (tmp_path / "junit-src.xml").write_text(JUNIT)
    [case] = _cases(tmp_path, """\
        name: suite
        command: "cp junit-src.xml {junit}; exit 1"
        """)
    results = run_case(case, _ctx(tmp_path, case))
    assert [(r.case_id, r.label) for r in results] == [
        ("suite", "FAILED"),
        ("suite::tests.test_x::test_ok", "PASS"),
        ("suite::tests.test_x::test_fault", "FAIL_507018"),
        ("suite::tests.test_x::test_wrong", "FAILED"),
    ]
    assert results[2].metrics["suite"] == "suite" and results[2].duration_s == 0.2
    assert results[2].metrics["fault_name"] == "ACL_ERROR_RT_AICPU_EXCEPTION" and results[2].metrics["rule"]
    assert "assert 1 == 2" in results[3].summary and all(r.device == "npu:6" for r in results)


def test_junit_that_is_not_xml_is_a_finding_for_a_passing_command(tmp_path):
    [case] = _cases(tmp_path, 'command: "echo garbage > {junit}"\n')
    [result] = run_case(case, _ctx(tmp_path, case))
    assert result.outcome is Outcome.CONTRACT and result.summary.startswith("junit: ") and "not XML" in result.summary


def test_placeholders_env_and_cwd(tmp_path):
    (tmp_path / "wt").mkdir()
    [case] = _cases(tmp_path, """\
        command: ["sh", "-c", "echo $PYPTO_ROOT $VIS {seed} {device} {device_index} $(pwd); echo {python} {out}"]
        env: {PYPTO_ROOT: "{worktree}", VIS: "{device_index}", EXTRA: x}
        matrix: {seed: [7]}
        pass: {regex: "^.*wt 6 7 npu:6 6 .*wt$", not_regex: LEAK}
        """)
    [result] = run_case(case, _ctx(tmp_path, case, env={"PATH": os.environ["PATH"], "LEAK_FROM": "base"},
                                   worktree=str(tmp_path / "wt")))
    assert result.outcome is Outcome.PASS, result.summary
    cmd = result.metrics["command"]
    assert cmd["cwd"] == str(tmp_path / "wt") and cmd["shell"] is False
    assert cmd["env"] == {"PYPTO_ROOT": str(tmp_path / "wt")} and cmd["returncode"] == 0   # allow-listed only


def test_no_environment_leaks_from_one_case_to_the_next(tmp_path):
    first, second = _cases(tmp_path, """\
        command: 'echo "[$ONLY_FIRST]"'
        env: {ONLY_FIRST: "{seed}"}
        matrix: {seed: [1, 2]}
        """)
    second = replace(second, env={})
    base = dict(os.environ)
    [a] = run_case(first, _ctx(tmp_path, first, env=base))
    [b] = run_case(second, _ctx(tmp_path, second, env=base))
    assert (tmp_path / "logs" / f"{first.case_id}.log").read_text() == "[1]\n"
    assert (tmp_path / "logs" / f"{second.case_id}.log").read_text() == "[]\n"
    assert "ONLY_FIRST" not in base and a.outcome is b.outcome is Outcome.PASS


def test_a_cwd_that_is_gone_at_run_time_is_a_finding(tmp_path):
    [case] = _cases(tmp_path, 'command: "true"\ncwd: "{worktree}/sub"\n')
    [result] = run_case(case, _ctx(tmp_path, case, worktree=str(tmp_path / "missing")))
    assert result.outcome is Outcome.CONTRACT and "is not a directory" in result.summary


def _selected(case, selection):
    from harness.casefiles.commandspec import CommandSpec
    spec = CommandSpec.from_wire(case.command)
    return replace(case, command=replace(spec, tests=selection).to_wire())


def test_a_selection_keeps_only_its_tests_and_the_suite_no_longer_decides(tmp_path):
    from harness.casefiles.commandspec import TestSelection
    from harness.commands.selection import deciding, failing_ids
    (tmp_path / "junit-src.xml").write_text(JUNIT)
    [case] = _cases(tmp_path, 'name: suite\ncommand: "cp junit-src.xml {junit}; exit 1"\n')
    case = _selected(case, TestSelection(("*test_ok",)))
    results = run_case(case, _ctx(tmp_path, case))
    assert [(r.case_id, r.label) for r in results] == [("suite", "FAILED"), ("suite::tests.test_x::test_ok", "PASS")]
    assert results[0].metrics["command"]["selection"]["matched"] == 1
    assert [r.case_id for r in deciding(results)] == ["suite::tests.test_x::test_ok"]     # exit 1 does not count
    assert failing_ids(results) == []


def test_a_selection_without_junit_leaves_the_command_deciding_with_a_note(tmp_path):
    from harness.casefiles.commandspec import TestSelection
    from harness.commands.selection import deciding
    [case] = _cases(tmp_path, 'name: suite\ncommand: "exit 1"\n')
    case = _selected(case, TestSelection(("*x*",)))
    [result] = run_case(case, _ctx(tmp_path, case))
    assert result.label == "FAILED" and "no JUnit tests to select (--test '*x*')" in result.summary
    assert deciding([result]) == [result]


def test_a_selection_that_matches_no_test_lists_some(tmp_path):
    from harness.casefiles.commandspec import TestSelection
    from harness.commands.selection import deciding, unmatched
    (tmp_path / "junit-src.xml").write_text(JUNIT)
    [case] = _cases(tmp_path, 'name: suite\ncommand: "cp junit-src.xml {junit}"\n')
    case = _selected(case, TestSelection(expr="nothing"))
    results = run_case(case, _ctx(tmp_path, case))
    assert len(results) == 1 and deciding(results) == []
    [miss] = unmatched(results)
    assert miss.line() == ("-k 'nothing': no test of suite matched (its tests include: tests.test_x::test_ok, "
                           "tests.test_x::test_fault, tests.test_x::test_wrong)")


def test_casedir_is_the_case_files_directory_whatever_the_worktree(tmp_path):
    """A regression test and a conftest kept beside the case file, run inside the ref's worktree:
    the files travel with the case, the code under test comes from the worktree."""
    worktree = tmp_path / "wt"
    (worktree / "engine").mkdir(parents=True)
    (worktree / "engine" / "__init__.py").write_text("def decode(tokens):\n    return [t + 1 for t in tokens]\n")
    cases = tmp_path / "cases" / "serving"
    cases.mkdir(parents=True)
    (cases / "conftest.py").write_text(textwrap.dedent("""\
        import pytest

        @pytest.fixture
        def tokens():
            return [1, 2]
        """))
    (cases / "test_regression_507018.py").write_text(textwrap.dedent("""\
        from engine import decode

        def test_decode_twice_gives_the_same(tokens):
            assert decode(tokens) == decode(tokens) == [2, 3]
        """))
    (cases / "regression.yaml").write_text(textwrap.dedent("""\
        name: regression
        command: ["{python}", "-m", "pytest", "{casedir}/test_regression_507018.py", "-q", "-p", "no:cacheprovider",
                  "--rootdir={casedir}", "--junitxml={junit}"]
        cwd: "{worktree}"
        env: {PYTHONPATH: "{worktree}", PYTEST_DISABLE_PLUGIN_AUTOLOAD: "1", PYTEST_ADDOPTS: ""}
        timeout_s: 120
        """))
    [case] = load_matrix(cases / "regression.yaml")
    results = run_case(case, _ctx(tmp_path, case, worktree=str(worktree)))
    assert [(r.case_id, r.label) for r in results] == [
        ("regression", "PASS"),
        # not under the cwd: pytest's dotted classname is kept (docs/commands.md, JUnit)
        ("regression::test_regression_507018::test_decode_twice_gives_the_same", "PASS")], results[0].report
    assert str(cases / "test_regression_507018.py") in results[0].metrics["command"]["command"]
    assert results[0].metrics["command"]["cwd"] == str(worktree)


def test_failure_text_is_the_head_of_what_a_failing_command_printed(tmp_path):
    from harness.commands.runner import failure_text
    (tmp_path / "repro.py").write_text(textwrap.dedent("""\
        import sys
        print("loading model qwen3-14b")
        for step in range(20):
            print(f"step {step}: ok")
        raise SystemExit("decode diverged at step 20: max abs error 3.2e+01")
        """))
    (tmp_path / "junit-src.xml").write_text(JUNIT)
    [case] = _cases(tmp_path, """\
        name: repro
        command: "{python} repro.py; cp junit-src.xml {junit}"
        pass: {not_regex: diverged}
        """)
    results = run_case(case, _ctx(tmp_path, case))
    text = failure_text(results[0])
    assert text.splitlines() == ["loading model qwen3-14b", "step 0: ok", "step 1: ok", "step 2: ok", "step 3: ok",
                                 "[...]", "decode diverged at step 20: max abs error 3.2e+01"]
    by_id = {r.case_id: r for r in results}
    assert failure_text(by_id["repro::tests.test_x::test_wrong"]).splitlines()[0] == "assert 1 == 2"
    assert failure_text(by_id["repro::tests.test_x::test_ok"]) is None
