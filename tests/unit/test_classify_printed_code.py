"""The label is the code the runtime printed (issue 12, items 1 and 2), in the shapes real logs have.

Story 1: a repro matrix printed ``FAIL_507018`` and, on the next line,
``orch_error_code=2, runtime_status=-2``; it came out ``CRASH`` with no code.
Story 2: a C++ runner printed ``aclrtSynchronizeStream(stream) failed: 507018`` and an
``EZ9999`` block with "there is an exception of fftsplus aicore error, core id is 9"; it came
out ``FAIL_507015``, a code nothing printed.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness.classify import classify_exception, classify_text, read_log
from harness.outcomes import Outcome, label

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def _classify(log: str, message: str = "runner exited with status 1"):
    return classify_exception("launch", "RuntimeError", message, "", log)


def _label(c) -> str:
    return label(c.outcome, c.code)


# -- story 1: FAIL_507018 with the orchestration code as detail ----------------------------------

STORY_1 = "upstream   68889bc   FAIL_507018\n                     orch_error_code=2, runtime_status=-2\n"


def test_story_1_the_printed_code_is_the_label_and_the_orchestration_code_is_detail():
    c = _classify(STORY_1)
    assert _label(c) == "FAIL_507018"
    assert (c.outcome, c.code, c.sticky) == (Outcome.ORCH_ERROR, 507018, True)
    assert (c.fields["orch_error_code"], c.fields["runtime_status"]) == (2, -2)
    assert (c.fields["cause"], c.fields["cause_code"]) == ("HEAP_RING_DEADLOCK", 2)
    assert "HEAP_RING_DEADLOCK (2)" in c.summary and "PTO2_RING_HEAP" in c.hint


ACL_507018 = [
    "FAIL_507018",
    "RuntimeError: NPU function error: aclrtSynchronizeStreamWithTimeout(stream, -1), error code is 507018",
    "RuntimeError: ACL stream synchronize failed, error code:507018",
    "[ERROR] aclrtSynchronizeStream(stream) failed: 507018 (/srv/ci/run/main.cpp:141)",
    "[ERROR] RUNTIME(4410,python):2026-11-30-10:00:00.000.001 [stream.cc:1404]4410 Synchronize: rtStreamSynchronize failed, ret=507018",
    "EH9999: [PID: 961] 2026-11-30-01:11:09.333.567 synchronize stream failed, runtime result = 507018[FUNC:ReportCallError]",
    "[ERROR] pypto: device 3 sync returned 507018",
    "pypto kernel sync returned 507018",
    "aclrtSynchronizeStream status: 507018",
    "stream sync done, code=507018",
    "rtStreamSynchronize failed, ret=ACL_ERROR_RT_AICPU_EXCEPTION(507018)",
]
PTO2_LINES = [
    ["orch_error_code=2, runtime_status=-2"],
    ["PTO2 runtime failed: orch_error_code=2 sched_error_code=0 runtime_status=-2"],
    ["runtime_status=-2 orch_error_code=2"],
    ["[ERROR] PTO2(77,python):2026-11-30-10:00:00.000.000 [device_runner.cc:903]   orch_error_code: 2",
     "[ERROR] PTO2(77,python):2026-11-30-10:00:00.000.001 [device_runner.cc:904]   runtime_status=-2"],
]


@pytest.mark.parametrize("code_line", ACL_507018)
@pytest.mark.parametrize("pto2", PTO2_LINES, ids=["comma", "full", "reversed", "split"])
@pytest.mark.parametrize("orch_first", [False, True], ids=["code-first", "orch-first"])
def test_story_1_in_any_printed_form_and_any_order(code_line, pto2, orch_first):
    lines = [*pto2, code_line] if orch_first else [code_line, *pto2]
    c = _classify("\n".join(lines) + "\n")
    assert (_label(c), c.outcome) == ("FAIL_507018", Outcome.ORCH_ERROR), c.summary
    assert (c.fields["orch_error_code"], c.fields["runtime_status"], c.fields["cause"]) == (2, -2, "HEAP_RING_DEADLOCK")


def test_an_orchestration_code_alone_is_its_own_label():
    c = _classify("orch_error_code=2, runtime_status=-2\n")
    assert (_label(c), c.outcome, c.name) == ("FAIL_2", Outcome.ORCH_ERROR, "HEAP_RING_DEADLOCK")
    sched = _classify("sched_error_code=100, runtime_status=-100\n")
    assert (_label(sched), sched.name) == ("FAIL_100", "SCHEDULER_TIMEOUT")
    assert classify_text("orch_error_code=0, sched_error_code=0, runtime_status=0") is None


# -- story 2: the printed code, the AICore report as detail ------------------------------------------

STORY_2 = (LOGS / "story_cpp_runner_507018_fftsplus_aicore.log").read_text()


def test_story_2_the_printed_code_is_the_label_and_the_aicore_report_is_detail():
    c = _classify(STORY_2)
    assert (_label(c), c.outcome, c.sticky, c.name) == (
        "FAIL_507018", Outcome.DEVICE_FAULT, True, "ACL_ERROR_RT_AICPU_EXCEPTION")
    assert c.fields["core_kind"] == "fftsplus aicore" and c.fields["core_id"] == 9
    assert c.fields["retcode"] == "0x26" and c.fields["task_error"] == "aicore exception"
    assert c.fields["error_str"].startswith("When the D-cache reads and writes data to the UB")
    assert "507015" not in c.summary and "FAIL_507015" not in c.secondary


AICORE_REPORTS = {
    "aicore": "there is an aicore error exception, core id is {core}, error code = 0x800000, dump info: pc start: 0x124080041000",
    "fftsplus aicore": "there is an exception of fftsplus aicore error, core id is {core}, error code = 0, dump info: pc start: 0x124200000168",
    "aivec": "there is an exception of aivec error, core id is {core}, error code = 0x4000000000000000, dump info: pc start: 0x124200000000",
    "fftsplus aivector": "there is an exception of fftsplus aivector error, core id is {core}, error code = 0x800000",
}
PRINTED = {
    "failed": "[ERROR] aclrtSynchronizeStream(stream) failed: {code} (/home/ci/runs/x/main.cpp:108)",
    "torch-npu": "RuntimeError: NPU function error: c10_npu::acl::AclrtSynchronizeStreamWithTimeout(stream()), error code is {code}",
    "vllm": "ERROR 11-30 06:00:01 [core.py:634] RuntimeError: ACL stream synchronize failed, error code:{code}",
    "cann trace": "EZ9999: [PID: 3301] 2026-11-30-06:00:01.100.200 synchronize stream failed, runtime result = {code}[FUNC:ReportCallError]",
}


@pytest.mark.parametrize("kind", sorted(AICORE_REPORTS))
@pytest.mark.parametrize("form", sorted(PRINTED))
@pytest.mark.parametrize("code", [507014, 507015, 507018, 507035])
@pytest.mark.parametrize("report_first", [False, True], ids=["code-first", "report-first"])
def test_the_label_is_the_printed_code_whatever_the_device_report_says(kind, form, code, report_first):
    report = [
        "[ERROR] RecentErrMsg: EZ9999: Inner Error!",
        "EZ9999[PID: 110830] 2026-11-30-11:19:38.491.647 (EZ9999):  The error from device(chipId:0, dieId:0), "
        "serial number is 11, " + AICORE_REPORTS[kind].format(core=21) + ".[FUNC:PrintCoreInfo]",
        "       The extend info: errcode:(0, 0x8000, 0) errorStr: timeout or trap error. fsmId:1, tslot:3, subErrType:4.",
        "       Kernel task happen error, retCode=0x25, [aicore timeout].[FUNC:PreCheckTaskErr]",
    ]
    printed = PRINTED[form].format(code=code)
    lines = [*report, printed] if report_first else [printed, *report]
    c = _classify("\n".join(lines) + "\n")
    assert (c.code, c.outcome) == (code, Outcome.DEVICE_FAULT), c.summary
    assert (c.fields["core_kind"], c.fields["core_id"]) == (kind, 21)
    assert (c.fields["error_str"], c.fields["retcode"], c.fields["task_error"]) == (
        "timeout or trap error", "0x25", "aicore timeout")
    for secondary in c.secondary:
        assert secondary.removeprefix("FAIL_") in "\n".join(lines)     # only printed codes


def test_a_printed_root_cause_code_still_beats_a_printed_cascade():
    text = "error code is 507018\nsynchronize stream failed, runtime result = 507015\n"
    c = classify_text(text)
    assert (c.code, c.secondary) == (507015, ("FAIL_507018",))


def test_without_a_printed_code_the_error_id_is_the_label_and_without_one_there_is_no_code():
    block = ("EZ9999: Inner Error!\n"
             "EZ9999: [PID: 7] The error from device(chipId:0, dieId:0), serial number is 2, "
             "there is an aicore error exception, core id is 4, error code = 0x800000\n")
    c = _classify(block)
    assert (_label(c), c.rule, c.fields["core_id"]) == ("FAIL_EZ9999", "npu_aicore_exception", 4)
    bare = _classify("Kernel task happen error, retCode=0x26, [aicore exception].\n"
                     "there is an aicore error exception, core id is 4\n")
    assert (_label(bare), bare.code, bare.outcome) == ("DEVICE_FAULT", None, Outcome.DEVICE_FAULT)
    assert (bare.fields["task_error"], bare.fields["core_id"]) == ("aicore exception", 4)


def test_a_wrapped_report_and_windows_line_ends_keep_label_and_detail():
    text = ("[ERROR] aclrtSynchronizeStream(stream) failed: 507018 (/ci/main.cpp:141)\r\n"
            "EZ9999[PID: 40917] 2026-11-30-08:20:44.007.311 (EZ9999):  The error from device(chipId:0, dieId:0),\r\n"
            "    serial number is 5, there is an exception of fftsplus aicore error,\r\n"
            "    core id is 9, error code = 0, dump info: pc start: 0x124400000168\r\n"
            "       The extend info: errcode:(0, 0x8000, 0) errorStr: timeout or trap error.\r\n")
    c = _classify(text)
    assert (_label(c), c.fields["core_kind"], c.fields["core_id"], c.fields["error_str"]) == (
        "FAIL_507018", "fftsplus aicore", 9, "timeout or trap error")


def test_torch_npu_names_a_code_in_words():
    c = _classify("", message="SUSPECT REMOTE ERROR")
    assert (_label(c), c.name) == ("FAIL_507057", "ACL_ERROR_RT_SUSPECT_REMOTE_ERROR")
    assert _label(_classify("", message="UCE ERROR")) == "FAIL_507053"


# -- no false faults ----------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "[INFO] processed 15070150 tokens",
    "[INFO] checkpoint step_507015.pt, hash=0x507015ab",
    "[INFO] seed=507015 batch=16",
    "[WARNING] latency 507.015 ms",
    "[ERROR] RUNTIME(507015,python):2026-11-30-10:00:00.000.001 [x.cc:1] request rejected",
    "[ERROR] 2026-11-30-10:00:00 (PID:507018, Device:0, RankID:-1) request rejected",
    "[ERROR] worker (PID: 507018) exited",
    "[ERROR] 2026-11-30 09:40:02.507018 request rejected",
    "error code is 5070150",
    "ValueError: expected 507015 rows, got 3",
    "there is an aicore error exception, core id is 507015",
])
def test_a_number_that_only_looks_like_a_code_is_no_code(text):
    c = _classify(text + "\n", message="plain failure")
    assert c.code != 507015 and c.code != 507018 and "FAIL_507015" not in c.secondary, c.summary


def test_an_ordinary_value_error_is_a_crash_not_a_device_fault():
    c = classify_exception("launch", "ValueError", "expected 507015 rows, got 3",
                           'Traceback (most recent call last):\n  File "k.py", line 4, in f\n', "")
    assert (c.outcome, c.code, c.sticky, c.rule) == (Outcome.CRASH, None, False, "exception")


def test_every_npu_fixture_label_was_printed():
    """No fixture's label is a code its log does not contain (or, for torch-npu, name)."""
    expected = yaml.safe_load((LOGS / "expected.yaml").read_text())
    for name, spec in expected.items():
        code = spec["code"]
        if not name.startswith(("npu_", "story_")) or code is None or spec["rule"] == "torch_npu_fault_name":
            continue
        text = read_log(LOGS / name)
        assert re.search(rf"(?<![0-9A-Za-z]){re.escape(str(code))}(?!\d)", text), (name, code)
