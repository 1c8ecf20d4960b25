"""Nothing a kernel does in a warm worker changes another case's verdict (hostile kernels).

Each kernel in ``tests/kernels_under_test/hostile`` computes the right answer and then
changes the process it shares with later cases; the harness must flag the case that did
it, put back or replace what it changed, and keep the next case's verdict its own.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest

from helpers import KERNELS_UNDER_TEST
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device
from harness.outcomes import Outcome
from harness.run.pool import DeviceWorker
from harness.run.spawn import WorkerOptions


def case(kernel: str, case_id: str, **kw) -> Case:
    base = dict(case_id=case_id, matrix="t", source="test", op="rope_kv_write",
                kernel=kernel if kernel == "reference" else f"hostile.kernels:{kernel}", geometry=PRESETS["tiny"],
                seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"), seed=3, timeout_s=60.0)
    return Case(**{**base, **kw})


@pytest.fixture(params=[True, False], ids=["forked", "spawned"])
def worker(request, tmp_path):
    options = WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "goldens"),
                            kernel_paths=(str(KERNELS_UNDER_TEST),), fork_cpu_workers=request.param)
    w = DeviceWorker(Device("cpu"), options)
    yield w
    w.close()


def run(worker: DeviceWorker, tmp_path, kernel: str, case_id: str, **kw):
    return worker.run(case(kernel, case_id, **kw), tmp_path / f"{case_id}.log")


def test_environment_and_cwd_are_put_back_without_a_finding(worker, tmp_path):
    first = run(worker, tmp_path, "sets_env_and_cwd", "env")
    second = run(worker, tmp_path, "needs_clean_env", "clean")
    assert first.outcome is Outcome.PASS, first.summary
    assert "environment variable HARNESS_HOSTILE_MARKER" in first.metrics["hygiene"]["restored"]
    assert second.outcome is Outcome.PASS, second.summary
    assert worker.starts == 1                              # nothing to replace the worker for


@pytest.mark.parametrize("kernel, says", [
    ("float64_default", "torch default dtype float32 → float64"),
    ("patches_rsqrt", "torch.rsqrt replaced"),
])
def test_a_changed_torch_is_a_contract_finding_and_a_fresh_worker(worker, tmp_path, kernel, says):
    bad = run(worker, tmp_path, kernel, "bad")
    pid = worker.proc.pid if worker.proc else None
    after = run(worker, tmp_path, "reference", "after")
    assert bad.outcome is Outcome.CONTRACT, bad.summary
    assert "the kernel changed process state" in bad.report and says in bad.report
    assert bad.sticky
    assert after.outcome is Outcome.PASS, after.summary
    assert worker.replacements == 1 and worker.proc.pid != pid


def test_a_thread_left_running_is_flagged_and_cannot_relabel_the_next_case(worker, tmp_path):
    """The thread prints an NPU fault line 0.2 s after its case; the next case's ValueError stays a CRASH."""
    bad = run(worker, tmp_path, "late_device_fault", "thread")
    after = run(worker, tmp_path, "raises_value_error", "next")
    time.sleep(0.3)
    assert bad.outcome is Outcome.CONTRACT and "1 thread(s) still running: late-fault-printer" in bad.report
    assert (after.outcome, after.code) == (Outcome.CRASH, None), after.summary
    assert "507015" not in (tmp_path / "next.log").read_text()
    assert worker.replacements == 1


def test_a_child_process_left_running_is_flagged_and_killed_with_the_worker(worker, tmp_path):
    bad = run(worker, tmp_path, "spawns_sleeper", "child")
    assert bad.outcome is Outcome.CONTRACT and "child process(es) still running" in bad.report, bad.report
    child = int(bad.report.split("child process(es) still running: pid ")[1].split()[0])
    after = run(worker, tmp_path, "reference", "after")
    assert after.outcome is Outcome.PASS
    assert _gone(child, within_s=5.0)


def test_fork_then_segfault_is_a_crash_at_once_not_a_hang(worker, tmp_path):
    started = time.monotonic()
    crashed = run(worker, tmp_path, "fork_then_segfault", "fork", timeout_s=60.0)
    assert (crashed.outcome, crashed.code) == (Outcome.CRASH, "SIGSEGV"), crashed.summary
    assert time.monotonic() - started < 15.0
    assert run(worker, tmp_path, "reference", "after").outcome is Outcome.PASS


def test_garbage_in_inherited_fds_is_that_cases_crash_and_the_run_goes_on(worker, tmp_path):
    before = run(worker, tmp_path, "reference", "before")
    bad = run(worker, tmp_path, "writes_garbage", "garbage")
    after = [run(worker, tmp_path, "reference", f"after{i}", seed=10 + i) for i in range(2)]
    assert before.outcome is Outcome.PASS
    assert bad.outcome is Outcome.CRASH and "worker protocol corrupted" in bad.summary, bad.summary
    assert [r.outcome for r in after] == [Outcome.PASS, Outcome.PASS]
    assert [r.case_id for r in after] == ["after0", "after1"]


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_a_forged_reply_without_the_launchs_nonce_is_not_the_verdict(worker, tmp_path):
    forged = run(worker, tmp_path, "forges_a_passing_reply", "forged")
    assert forged.outcome is Outcome.CRASH, forged.summary
    assert forged.summary == "worker protocol corrupted: a reply for case 'forged' with another launch's nonce"
    assert run(worker, tmp_path, "reference", "after").outcome is Outcome.PASS


def test_an_environment_put_back_is_a_warning_on_the_result_that_made_it(worker, tmp_path):
    """Not a failure: the case passes, its result says which variables were put back; the next
    case of the same kernel (imported once, so it does not set them again) has no warning."""
    first = run(worker, tmp_path, "sets_env_and_cwd", "env")
    assert first.outcome is Outcome.PASS and len(first.warnings) == 2, first.warnings
    assert first.warnings[0] == ("the kernel changed the environment: HARNESS_HOSTILE_MARKER (set); put back "
                                 "after this case, so later cases in this worker do not see the change")
    assert first.warnings[1].startswith("the kernel changed the working directory to /; put back to ")
    at_import = [worker.run(replace(case("reference", f"imp{seed}", seed=seed),
                                    kernel="hostile.env_at_import:rope_kv_write"), tmp_path / f"imp{seed}.log")
                 for seed in (1, 2)]
    assert [r.outcome for r in at_import] == [Outcome.PASS, Outcome.PASS]
    assert at_import[0].warnings == ("the kernel changed the environment: HARNESS_HOSTILE_TUNING (set); put back "
                                     "after this case, so later cases in this worker do not see the change",)
    assert at_import[1].warnings == ()
    clean = run(worker, tmp_path, "reference", "clean")
    assert clean.outcome is Outcome.PASS and clean.warnings == ()
