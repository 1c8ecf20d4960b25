"""Careless kernels that leave process-wide hooks in a warm worker (issue 23, item 1): each is a
``CONTRACT`` finding for the case that did it, or, when the change happens after that case was
answered, a "deferred change after case X" that replaces the worker and runs the next case again
in a fresh one.  Either way every clean case after it passes and the mutant control still fails."""
from __future__ import annotations

import os

import pytest

from helpers import KERNELS_UNDER_TEST, hostile_case
from harness.case import Case
from harness.devices import Device
from harness.outcomes import Outcome
from harness.run.pool import DeviceWorker
from harness.run.spawn import WorkerOptions


def case(kernel: str, case_id: str) -> Case:
    return hostile_case("careless", kernel, case_id)


def _after(worker, tmp_path):
    """Three clean cases, spread over more than a second (the alarm's delay), and a mutant control."""
    import time
    clean = []
    for i in range(3):
        clean.append(worker.run(case("reference", f"clean{i}"), tmp_path / f"clean{i}.log"))
        time.sleep(0.4)
    control = worker.run(case("skip_rope", "control"), tmp_path / "control.log")
    return clean, control


@pytest.mark.parametrize("kernel, says", [
    ("autocast_left_on", "torch autocast (cpu) off → on (bfloat16)"),
    ("function_mode_left_on", "torch function mode stack 0 → 1 deep"),
    ("hostile.rsqrt_lib:rope_kv_write", "torch.library implementation registered: aten::rsqrt for CPU"),
    ("patches_round", "builtins.round replaced"),
    ("alarm_prints_fault", "interval timer ITIMER_REAL armed (signal.alarm)"),
    ("itimer_patches_torch", "interval timer ITIMER_VIRTUAL armed"),
    ("gc_callback_patches_torch", "gc.callbacks "),
    ("adds_audit_hook", "1 audit hook(s) added"),
])
def test_a_hook_left_behind_is_the_contract_of_the_case_that_left_it(worker, tmp_path, kernel, says):
    bad = worker.run(case(kernel, "bad"), tmp_path / "bad.log")
    assert bad.outcome is Outcome.CONTRACT, bad.summary
    assert says in bad.report, bad.report
    clean, control = _after(worker, tmp_path)
    assert [r.outcome for r in clean] == [Outcome.PASS] * 3, [r.summary for r in clean]
    assert control.outcome is Outcome.MISMATCH, control.summary
    assert "507018" not in "".join((tmp_path / f"clean{i}.log").read_text() for i in range(3))
    assert worker.replacements == 1 and not worker.warnings


def test_a_change_made_after_the_case_was_answered_is_deferred_to_it(tmp_path):
    """A finalizer on an input buffer patches torch when the harness drops the buffer, after the case
    was checked: the next case finds the worker changed, runs again in a fresh worker and passes, and
    the change is blamed on the case that ran last in the old worker.  Inputs are not kept for
    repeats here, so the buffer is dropped when its case ends (a kept one goes when it is evicted)."""
    options = WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "goldens"),
                            kernel_paths=(str(KERNELS_UNDER_TEST),),
                            base_env={**os.environ, "HARNESS_REUSE_INPUTS": "0"})
    worker = DeviceWorker(Device("cpu"), options)
    try:
        _deferred(worker, tmp_path)
    finally:
        worker.close()


def _deferred(worker, tmp_path):
    bad = worker.run(case("finalizer_patches_torch", "bad"), tmp_path / "bad.log")
    assert bad.outcome is Outcome.PASS, bad.summary           # nothing had changed when it was checked
    clean, control = _after(worker, tmp_path)
    assert [r.outcome for r in clean] == [Outcome.PASS] * 3, [r.summary for r in clean]
    assert control.outcome is Outcome.MISMATCH, control.summary
    deferred = clean[0].metrics["hygiene"]["deferred"]
    assert deferred["after_case"] == "bad" and "torch.rsqrt replaced" in deferred["changes"], deferred
    assert worker.warnings == [w for w in worker.warnings if w.startswith("deferred change after case bad ")]
    assert len(worker.warnings) == 1 and worker.replacements == 1


def test_clean_cases_and_a_mutant_in_one_worker_raise_nothing(worker, tmp_path):
    """No false alarm: the reference, a mutant and a lazy torch import leave no finding."""
    results = [worker.run(case("reference", "a"), tmp_path / "a.log"),
               worker.run(case("skip_rope", "m"), tmp_path / "m.log"),
               worker.run(case("reference", "b"), tmp_path / "b.log")]
    assert [r.outcome for r in results] == [Outcome.PASS, Outcome.MISMATCH, Outcome.PASS]
    assert worker.replacements == 0 and not worker.warnings
    assert all("hygiene" not in r.metrics for r in results), [r.metrics.get("hygiene") for r in results]
