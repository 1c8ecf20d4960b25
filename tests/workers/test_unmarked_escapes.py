"""Strays the run's environment marker misses (issue 37, item 4), written as a hostile kernel's helper
would: out of the worker's tree (subreaper off, double fork), then ``env -i`` exec of ``sleep`` (no
variable of the worker's left), or ``PR_SET_DUMPABLE`` 0 (its /proc/<pid>/environ unreadable but to
root).  The second marker finds them: the worker's cgroup where the machine lets the harness make
one, else the worker's session (which a setsid leaves).  Each is its case's ``CONTRACT`` and is killed
at the case's end; a clean case after it passes; a process the run did not start is never touched."""
from __future__ import annotations

import os
import subprocess

import pytest

from helpers import hostile_case, pid_written, process_gone
from harness import processes
from harness.case import Case
from harness.outcomes import Outcome

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")


def case(kernel: str, case_id: str, pids) -> Case:
    return hostile_case("escapes_marker", kernel, case_id, {"HOSTILE_PIDS": str(pids)})


@pytest.fixture
def no_cgroup(monkeypatch):
    """A machine where no cgroup can be made: the session is the only second marker."""
    monkeypatch.setattr(processes, "_cgroup_run", [""])
    monkeypatch.setattr(processes, "_cgroups", {})


def _environ_unreadable(monkeypatch) -> None:
    """What a front end that is not root sees of an undumpable process (or one of another uid): no
    environment to read.  Every environment then reads as unmarked."""
    monkeypatch.setattr(processes, "marked_processes", lambda nonce=None, exclude=frozenset(): [])


def _needs_cgroup() -> None:
    """Skip where the harness cannot make a cgroup and move a process into it (as it does a worker)."""
    probe = subprocess.Popen(["sleep", "30"])
    try:
        processes.enter(probe.pid, "probe")
        usable = "probe" in processes._cgroups
    finally:
        probe.kill()
        probe.wait()
        processes._sessions.pop(probe.pid, None)
        processes.remove_cgroups()
    if not usable:
        pytest.skip("no writable cgroup v2 hierarchy at this process's cgroup: an escape in a session of its "
                    "own with an environment of its own making is not found here (docs/contracts.md)")


def _escape_then_clean(worker, tmp_path, kernel: str, name: str):
    pids = tmp_path / "pids"
    pids.mkdir()
    bad = worker.run(case(kernel, "bad", pids), tmp_path / "bad.log")
    escaped = pid_written(pids, name)
    try:
        assert bad.outcome is Outcome.CONTRACT, bad.summary
        assert "left the worker's process tree" in bad.summary and f"pid {escaped}" in bad.summary, bad.summary
        assert process_gone(escaped), open(f"/proc/{escaped}/cmdline", "rb").read()     # killed at the case's end
        clean = [worker.run(case("reference", f"clean{i}", pids), tmp_path / f"clean{i}.log") for i in range(2)]
        assert [r.outcome for r in clean] == [Outcome.PASS] * 2, [r.summary for r in clean]
    finally:
        if not process_gone(escaped):
            os.kill(escaped, 9)
    return bad


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "spawned"])
def test_an_env_i_exec_after_double_fork_and_setsid_is_found_by_the_workers_cgroup(make_worker, tmp_path, fork):
    _needs_cgroup()
    bad = _escape_then_clean(make_worker(fork), tmp_path, "scrubbed_env_double_fork", "scrubbed")
    assert "(sleep 600)" in bad.summary, bad.summary


@pytest.mark.parametrize("environ", ["readable", "unreadable"])
def test_an_undumpable_escape_is_found_whether_or_not_its_environment_can_be_read(make_worker, tmp_path,
                                                                                   monkeypatch, environ):
    if environ == "unreadable" or os.geteuid() != 0:
        _needs_cgroup()                       # it took a session of its own: only its cgroup is left
    if environ == "unreadable":
        _environ_unreadable(monkeypatch)
    _escape_then_clean(make_worker(True), tmp_path, "undumpable_double_fork", "undumpable")


def test_without_a_cgroup_an_env_i_escape_that_keeps_the_session_is_found_by_it(make_worker, tmp_path, monkeypatch,
                                                                                 no_cgroup):
    _environ_unreadable(monkeypatch)
    assert processes.run_cgroup() is None
    _escape_then_clean(make_worker(True), tmp_path, "scrubbed_env_same_session", "scrubbed")


def test_a_process_the_run_did_not_start_is_never_killed_or_blamed(make_worker, tmp_path):
    """A process of the test's own, with no marker, in a session of its own and in the same session as
    the test, lives through an escape's case, a clean case and the run's last sweep."""
    outsiders = [subprocess.Popen(["sleep", "60"], start_new_session=True),
                 subprocess.Popen(["sleep", "60"], env={"PATH": os.environ.get("PATH", "")})]
    try:
        worker = make_worker(True)
        _escape_then_clean(worker, tmp_path, "scrubbed_env_same_session", "scrubbed")    # found anywhere
        worker.close()
        killed = processes.sweep()                       # the run's end
        assert not any(f"pid {p.pid} " in k for p in outsiders for k in killed), killed
        assert not any(process_gone(p.pid) for p in outsiders)
    finally:
        for p in outsiders:
            p.kill()
            p.wait()


def test_an_escape_into_a_cgroup_below_its_workers_is_found_there(make_worker, tmp_path):
    """A process with write access to the hierarchy (root) makes a cgroup below its worker's and moves
    there: still below the worker's, found, and removed with the run's cgroups at its end."""
    _needs_cgroup()
    worker = make_worker(True)
    bad = _escape_then_clean(worker, tmp_path, "cgroup_of_its_own", "scrubbed")
    assert "(sleep 600)" in bad.summary, bad.summary
    worker.close()
    processes.sweep()                                     # the run's end
    assert not os.path.exists(processes.run_cgroup()), os.listdir(processes.run_cgroup())


def test_harness_cgroup_off_makes_no_cgroup(monkeypatch):
    """A host whose cgroups another manager owns: the run makes none, whatever is writable."""
    monkeypatch.setattr(processes, "_cgroup_run", [None])
    monkeypatch.setattr(processes, "_cgroup2_base", lambda: pytest.fail("the hierarchy was looked at"))
    monkeypatch.setenv(processes.CGROUP_ENV, "off")
    assert processes.run_cgroup() is None
