"""Helpers that stop or die (issue 37, item 5), written as an outsider would: a kernel stops the zygote
its worker was forked from, a worker stops itself, a worker is SIGKILLed once with an empty log (the
OOM killer), the zygote is killed from outside between cases.  Never an EOFError, never a hang: the
stopped or dead helper is replaced, the case it was serving runs once more, and clean cases and the
mutant control keep their verdicts."""
from __future__ import annotations

import os
import signal
import threading

import pytest

from helpers import KERNELS_UNDER_TEST
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device
from harness.outcomes import Outcome
from harness.processes import process_state
from harness.run.pool import DeviceWorker
from harness.run.spawn import WorkerOptions

BOUND_S = 90.0      # a hang fails the test instead of stalling the suite


def case(kernel: str, case_id: str) -> Case:
    if ":" not in kernel and kernel not in ("reference", "skip_rope"):
        kernel = f"hostile.helpers_stop:{kernel}"
    return Case(case_id=case_id, matrix="t", source="test", op="rope_kv_write", kernel=kernel,
                geometry=PRESETS["tiny"], seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"), seed=3,
                timeout_s=30.0)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stopped")
    options = WorkerOptions(log_dir=tmp / "logs", golden_cache=str(tmp / "goldens"),
                            kernel_paths=(str(KERNELS_UNDER_TEST),),
                            base_env={**os.environ, "HOSTILE_ONCE": str(tmp / "once")})
    w = DeviceWorker(Device("cpu"), options)
    yield w
    w.close()


def _zygote_pid() -> int | None:
    from multiprocessing import forkserver
    return forkserver._forkserver._forkserver_pid


def bounded(fn):
    """``fn()``'s value, or a failure after BOUND_S (the stopped zygote, ours, is let go so nothing stays stuck)."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(BOUND_S)
    if thread.is_alive():
        pid = _zygote_pid()
        if pid and process_state(pid) == "T":
            os.kill(pid, signal.SIGCONT)
        pytest.fail(f"no result within {BOUND_S:g}s: a hang")
    return out[0]


def _clean_and_control(worker, tmp_path, tag):
    clean = worker.run(case("reference", f"{tag}-clean"), tmp_path / "clean.log")
    control = worker.run(case("skip_rope", f"{tag}-control"), tmp_path / "control.log")
    assert (clean.outcome, control.outcome) == (Outcome.PASS, Outcome.MISMATCH), (clean.summary, control.summary)


def test_a_kernel_that_stops_the_zygote_does_not_stall_the_run(worker, tmp_path):
    def scenario():
        bad = worker.run(case("stops_its_parent", "stop-zygote"), tmp_path / "bad.log")
        worker.replace("the next case needs a fresh worker from the zygote")
        _clean_and_control(worker, tmp_path, "stop-zygote")
        return bad
    bad = bounded(scenario)
    assert bad.outcome is Outcome.PASS, bad.summary       # it answered right; its parent is not its state
    assert process_state(_zygote_pid()) not in ("T", "t", "")


def test_a_worker_stopped_mid_case_is_replaced_and_twice_is_a_harness_error(worker, tmp_path):
    result = bounded(lambda: worker.run(case("stops_itself", "stop-self"), tmp_path / "stop.log"))
    assert result.outcome is Outcome.HARNESS_ERROR, result.summary
    assert result.summary == (f"{result.metrics['rerun']['first_attempt']['why']}; again on the re-run: "
                              f"{result.summary.split('again on the re-run: ')[1]}")
    assert "was stopped (SIGSTOP) mid-case" in result.summary
    bounded(lambda: _clean_and_control(worker, tmp_path, "stop-self"))


def test_one_sigkill_with_an_empty_log_is_not_the_kernels_crash(worker, tmp_path):
    result = bounded(lambda: worker.run(case("killed_once", "oom-once"), tmp_path / "once.log"))
    assert result.outcome is Outcome.PASS, result.summary
    assert "killed by SIGKILL with an empty log" in result.metrics["rerun"]["first_attempt"]["why"]
    assert any("oom-once" in w and "re-run once in a fresh worker" in w for w in worker.warnings)


def test_a_sigkill_every_time_is_the_kernels_crash_on_the_second_sighting(worker, tmp_path):
    result = bounded(lambda: worker.run(case("killed_always", "oom-always"), tmp_path / "always.log"))
    assert (result.outcome, result.code) == (Outcome.CRASH, "SIGKILL"), (result.outcome, result.code, result.summary)
    assert "second_attempt" in result.metrics["rerun"]


def test_the_zygote_killed_from_outside_is_replaced(worker, tmp_path):
    def scenario():
        assert worker.run(case("reference", "before-kill"), tmp_path / "before.log").outcome is Outcome.PASS
        os.kill(_zygote_pid(), signal.SIGKILL)        # the test's own helper, as the OOM killer would
        _clean_and_control(worker, tmp_path, "zygote-killed")
    bounded(scenario)
