"""Nothing a kernel starts outlives its case (issue 23, item 2): the worker is a child subreaper,
so a process in a session of its own or a double-forked one stays below it, is reported as a
``CONTRACT`` finding with its command line, and is killed before the reply; clean cases after it
in the same run pass, and nothing written into an inherited socket reaches their exchange."""
from __future__ import annotations

import os
import time

import pytest

from helpers import KERNELS_UNDER_TEST, hostile_case, pid_written, process_gone
from harness.case import Case
from harness.devices import Device
from harness.outcomes import Outcome
from harness.run.pool import DeviceWorker
from harness.run.spawn import WorkerOptions

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")


def case(kernel: str, case_id: str, pids) -> Case:
    return hostile_case("escapes", kernel, case_id, {"HOSTILE_PIDS": str(pids)})


@pytest.mark.parametrize("kernel, name, says, fork", [
    ("daemon_in_new_session", "daemon", "(sleep 600)", True),
    ("detached_writer", "writer", "child process(es) still running", True),
    ("detached_writer", "writer", "child process(es) still running", False),
], ids=["new-session", "daemonized", "daemonized-spawned"])
def test_an_escaped_process_is_reported_killed_and_cannot_touch_later_cases(make_worker, tmp_path, kernel, name,
                                                                             says, fork):
    worker = make_worker(fork)
    pids = tmp_path / "pids"
    pids.mkdir()
    bad = worker.run(case(kernel, "bad", pids), tmp_path / "bad.log")
    escaped = pid_written(pids, name, tries=200)
    assert bad.outcome is Outcome.CONTRACT, bad.summary
    assert says in bad.report and f"pid {escaped}" in bad.report, bad.report
    assert process_gone(escaped)                                   # killed before the reply, not at the run's end
    clean = [worker.run(case("reference", f"clean{i}", pids), tmp_path / f"clean{i}.log") for i in range(3)]
    time.sleep(0.4)                                         # past the moment the writer would have written
    clean.append(worker.run(case("reference", "clean3", pids), tmp_path / "clean3.log"))
    assert [r.outcome for r in clean] == [Outcome.PASS] * 4, [r.summary for r in clean]
    assert worker.replacements == 1


def test_a_process_started_between_cases_is_deferred_and_dies_with_the_worker(tmp_path):
    """A finalizer forks a daemon after its case was answered: the next case finds it (a change
    since the worker started), runs again in a fresh worker, and the old worker's end kills the
    daemon (before, it outlived the run with init as its parent).  Inputs are not kept for
    repeats, so the buffer carrying the finalizer is dropped when its case ends."""
    options = WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "goldens"),
                            kernel_paths=(str(KERNELS_UNDER_TEST),),
                            base_env={**os.environ, "HARNESS_REUSE_INPUTS": "0"})
    worker = DeviceWorker(Device("cpu"), options)
    pids = tmp_path / "pids"
    pids.mkdir()
    try:
        first = worker.run(case("finalizer_starts_daemon", "first", pids), tmp_path / "first.log")
        late = pid_written(pids, "late", tries=200)
        assert first.outcome is Outcome.PASS and not process_gone(late)
        after = worker.run(case("reference", "after", pids), tmp_path / "after.log")
    finally:
        worker.close()
    assert after.outcome is Outcome.PASS, after.summary
    assert after.metrics["hygiene"]["deferred"]["after_case"] == "first"
    assert f"1 process(es) started: pid {late}" in after.metrics["hygiene"]["deferred"]["changes"]
    for _ in range(100):
        if process_gone(late):
            break
        time.sleep(0.01)
    assert process_gone(late)


def _stray(tmp_path, marker: str, comm: str | None = None) -> "subprocess.Popen":
    """A process outside every worker's tree carrying ``marker`` (and, given, ``comm`` as its name):
    what another worker's kernel left, as the sweep finds it."""
    import subprocess
    import sys

    from harness.processes import MARKER_ENV
    code = ("import ctypes, sys, time\n"
            "n = sys.argv[1].encode()\n"
            "n and ctypes.CDLL(None).prctl(15, ctypes.c_char_p(n), 0, 0, 0)\n"
            "time.sleep(60)\n")
    env = {k: v for k, v in os.environ.items() if k != MARKER_ENV}
    return subprocess.Popen([sys.executable, "-c", code, comm or ""], env={**env, MARKER_ENV: marker},
                            start_new_session=True)


def test_a_stray_of_another_worker_is_not_blamed_on_this_workers_clean_case(make_worker, tmp_path):
    """Two workers run cases at once: what one's kernel left outside every tree is swept and blamed
    at the end of that worker's case, not at the end of the other's clean case (it was: a clean
    reference case got CONTRACT in a two-worker run, 1 of 3 CI runs)."""
    from harness.processes import belongs_to, marker_env, run_nonce, sweep, worker_comm
    other = _stray(tmp_path, marker_env("w1")["HARNESS_RUN_NONCE"])                  # exec'd: w1's marker
    copy = _stray(tmp_path, run_nonce(), comm=worker_comm(f"{run_nonce()}.w1"))    # a forked w1's copy
    try:
        for _ in range(200):
            if all(os.path.exists(f"/proc/{p.pid}/environ") for p in (other, copy)) and \
                    open(f"/proc/{copy.pid}/comm").read().strip() == worker_comm(f"{run_nonce()}.w1"):
                break
            time.sleep(0.01)
        assert belongs_to(other.pid, "w1") and belongs_to(copy.pid, "w1")
        assert not belongs_to(other.pid, "w0") and not belongs_to(copy.pid, "w0")
        worker = make_worker(True)                                      # w0
        clean = worker.run(case("reference", "clean", tmp_path), tmp_path / "clean.log")
        assert clean.outcome is Outcome.PASS, clean.summary
        assert not process_gone(other.pid) and not process_gone(copy.pid)             # left to w1's case
        killed = sweep(worker="w1")
        assert {f"pid {other.pid}", f"pid {copy.pid}"} <= {k.split(" (")[0] for k in killed}
    finally:
        for p in (other, copy):
            p.kill()
            p.wait()


def test_a_forked_worker_names_itself_as_the_front_end_reads_it(make_worker, tmp_path):
    """The worker's process name is the front end's ``worker_comm`` of its marker (restated in
    harness/worker/serve.py, which imports nothing of the front end)."""
    from harness.processes import MARKER_ENV, run_nonce, worker_comm
    from harness.worker import serve
    assert serve._MARKER_ENV == MARKER_ENV
    worker = make_worker(True)
    assert worker.run(case("reference", "one", tmp_path), tmp_path / "one.log").outcome is Outcome.PASS
    pid = worker.current.proc.pid
    assert open(f"/proc/{pid}/comm").read().strip() == worker_comm(f"{run_nonce()}.w0")
