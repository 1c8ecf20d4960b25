"""harness/worker/hygiene.py in this process: what a kernel's window leaves behind is found and put back."""
from __future__ import annotations

import functools
import os
import subprocess
import threading

import torch

from harness.outcomes import Outcome
from harness.worker import hygiene
from harness.worker.findings import Finding, Findings


def window(act) -> hygiene.Disturbance:
    with hygiene.Watch() as watch:
        act()
    return watch.disturbed


def test_a_clean_window_finds_nothing():
    assert window(lambda: torch.ones(4).sum()) == hygiene.Disturbance()


def test_environment_and_cwd_are_put_back_without_a_finding(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def act():
        os.environ["HYGIENE_UNIT"] = "1"
        os.chdir("/")

    disturbed = window(act)
    assert "HYGIENE_UNIT" not in os.environ and os.getcwd() == str(tmp_path)
    assert disturbed.findings == () and not disturbed.replace_reason
    assert disturbed.restored == ("environment variable HYGIENE_UNIT", "working directory /")
    assert disturbed.warnings == (
        "the kernel changed the environment: HYGIENE_UNIT (set); put back after this case, so later cases in "
        "this worker do not see the change",
        f"the kernel changed the working directory to /; put back to {tmp_path} after this case, so later cases "
        "in this worker do not see the change")


def test_the_warning_says_how_each_variable_changed_and_counts_past_eight(monkeypatch):
    monkeypatch.setenv("HYGIENE_CHANGED", "a")
    monkeypatch.setenv("HYGIENE_REMOVED", "b")

    def act():
        os.environ["HYGIENE_CHANGED"] = "c"
        del os.environ["HYGIENE_REMOVED"]
        os.environ.update({f"HYGIENE_NEW{i}": "1" for i in range(8)})

    (warning,) = window(act).warnings
    assert warning.startswith("the kernel changed the environment: HYGIENE_CHANGED (changed), HYGIENE_NEW0 (set), ")
    assert "HYGIENE_REMOVED" not in warning and warning.count("(set)") == 7 and ", and 2 more; put back" in warning
    assert os.environ["HYGIENE_CHANGED"] == "a" and os.environ["HYGIENE_REMOVED"] == "b"


def test_torch_settings_are_findings_and_are_put_back():
    disturbed = window(lambda: (torch.set_default_dtype(torch.float64), torch.set_grad_enabled(False)))
    assert torch.get_default_dtype() is torch.float32 and torch.is_grad_enabled()
    (finding,) = disturbed.findings
    assert finding.startswith("the kernel changed process state: torch default dtype float32 → float64")
    assert "torch grad mode True → False" in finding
    assert "torch.Storage" not in finding                   # torch's own rebinding on set_default_dtype
    assert disturbed.replace_reason == finding


def test_a_patched_torch_function_is_found_even_behind_functools_wraps_and_put_back():
    original, method = torch.rsqrt, torch.Tensor.rsqrt

    def act():
        torch.rsqrt = functools.wraps(original)(lambda x: original(x) * 1.001)
        torch.Tensor.rsqrt = lambda self: self

    (finding,) = window(act).findings
    assert "torch.rsqrt replaced" in finding and "torch.Tensor.rsqrt added" in finding
    assert torch.rsqrt is original and torch.Tensor.rsqrt is method


def test_a_new_module_is_allowed_a_replaced_one_is_not():
    import sys
    import json
    assert window(lambda: __import__("xml.dom.minidom")) == hygiene.Disturbance()
    saved = sys.modules["json"]
    (finding,) = window(lambda: sys.modules.__setitem__("json", object())).findings
    assert "sys.modules['json'] replaced" in finding and sys.modules["json"] is saved is json


def test_leftover_threads_and_processes_are_findings():
    stop = threading.Event()
    children = []
    try:
        disturbed = window(lambda: (threading.Thread(target=stop.wait, name="lingering").start(),
                                    children.append(subprocess.Popen(["sleep", "30"]))))
    finally:
        stop.set()
        for child in children:
            child.kill()
            child.wait()
    assert disturbed.findings[0] == "the kernel left 1 thread(s) still running: lingering"
    assert disturbed.findings[1].startswith(f"the kernel left 1 child process(es) still running: pid {children[0].pid}")
    # a thread that ended and a child that was waited for are not leftovers
    assert window(lambda: (subprocess.run(["true"]), _joined())) == hygiene.Disturbance()


def _joined() -> None:
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()


def test_findings_join_the_checks_by_precedence():
    found = Findings(Outcome.OOB_WRITE, (Finding(Outcome.OOB_WRITE, "guard band"),))
    merged = hygiene.with_findings(found, hygiene.Disturbance(("the kernel left 1 thread(s) still running: t",)))
    assert merged.outcome is Outcome.OOB_WRITE and [f.outcome for f in merged.items] == [Outcome.OOB_WRITE,
                                                                                          Outcome.CONTRACT]
    passed = Findings(Outcome.PASS, ())
    assert hygiene.with_findings(passed, hygiene.Disturbance()) is passed
    assert hygiene.with_findings(passed, hygiene.Disturbance(("x",))).summary == "x"
