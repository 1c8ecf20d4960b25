"""Judging a finished command: exit status and pass rule, then the classifier on its output.

No processes: ``Finished`` records as a command would leave them.  The texts are what a
serving test, a repro script and the shell print.
"""
from __future__ import annotations

import pytest

from harness.commands.process import Finished
from harness.commands.runner import judge
from harness.casefiles.commandspec import CommandSpec, PassRule
from harness.outcomes import Outcome

SHELL = CommandSpec("python repro.py")
LIST = CommandSpec(("python", "repro.py"))


def _done(rc, text: str = "", **kw) -> Finished:
    data = text.encode()
    return Finished(("sh",), rc, data, len(data), 0.1, **kw)


def test_exit_zero_is_a_pass_even_when_the_output_says_error():
    v = judge(_done(0, "tests passed; 0 errors; error code is 0\n"), SHELL, 60)
    assert v.outcome is Outcome.PASS


def test_a_serving_test_that_dies_with_507018_is_a_device_fault():
    text = ("tests/test_qwen3_serving.py F\n"
            "E   RuntimeError: ACL stream synchronize failed, error code is 507018\n"
            "1 failed in 3.2s\n")
    v = judge(_done(1, text), SHELL, 60)
    assert (v.outcome, v.code) == (Outcome.DEVICE_FAULT, 507018)


def test_an_orchestration_error_is_orch_error():
    v = judge(_done(1, "PTO2 runtime failed: orch_error_code=2 sched_error_code=0 runtime_status=-2\n"), LIST, 60)
    assert v.outcome is Outcome.ORCH_ERROR


@pytest.mark.parametrize("spec, rc", [(LIST, -11), (SHELL, 139)])
def test_a_signal_is_a_crash_whether_seen_directly_or_through_the_shell(spec, rc):
    v = judge(_done(rc, "decoding...\n"), spec, 60)
    assert (v.outcome, v.code) == (Outcome.CRASH, "SIGSEGV")


def test_status_139_of_a_program_run_without_a_shell_is_not_a_signal():
    v = judge(_done(139, "bye\n"), LIST, 60)
    assert v.outcome is Outcome.FAILED and "status 139" in v.summary


def test_a_timeout_is_a_hang_and_names_what_the_output_showed():
    v = judge(_done(None, "error code is 507018\n", timed_out=True), SHELL, 5)
    assert v.outcome is Outcome.HANG
    assert "timeout_s=5" in v.summary and "507018" in v.summary


@pytest.mark.parametrize("text, name", [
    ("/bin/sh: 1: pythn: not found\n", "pythn"),
    ("bash: line 1: pythn: command not found\n", "pythn"),
])
def test_a_missing_program_under_the_shell_is_a_build_error_naming_it(text, name):
    v = judge(_done(127, text), SHELL, 60)
    assert v.outcome is Outcome.BUILD_ERROR and name in v.summary


def test_a_program_that_cannot_be_started_is_a_build_error():
    v = judge(Finished(("pythn",), None, b"", 0, 0.0, not_started="No such file or directory: pythn"), LIST, 60)
    assert v.outcome is Outcome.BUILD_ERROR and "pythn" in v.summary


def test_a_plain_failure_with_no_signature_is_failed_not_a_device_class():
    v = judge(_done(1, "E   assert 3 == 4\n1 failed\n"), SHELL, 60)
    assert v.outcome is Outcome.FAILED and "status 1" in v.summary


def test_the_pass_rule_regexes_and_exit_code():
    rule = CommandSpec("x", pass_rule=PassRule(exit_code=3, regex=r"^accuracy ok$", not_regex=r"nan"))
    assert judge(_done(3, "accuracy ok\n"), rule, 60).outcome is Outcome.PASS
    missing = judge(_done(3, "accuracy low\n"), rule, 60)
    assert missing.outcome is Outcome.FAILED and "pass.regex" in missing.summary
    assert "pass.not_regex" in judge(_done(3, "accuracy ok\nloss nan\n"), rule, 60).summary
    assert "pass needs 3" in judge(_done(0, "accuracy ok\n"), rule, 60).summary
