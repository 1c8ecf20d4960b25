"""The sweep reads a process's environment once (``processes.marked_processes`` keeps what it read by
pid and /proc inode): what that must not change.  A process started after a sweep is still found; a
marked one that exec's with no environment stays found (a kernel's child scrubbing its marker); a
process the run does not own is never found; a pid reused by a new process is read anew."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from harness import processes

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")


def _marked(env_extra: dict[str, str], argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(argv, env={**os.environ, **env_extra})


def _wait_exec(pid: int, comm: str) -> None:
    """Until ``pid`` runs the program ``comm`` (its name, not its command line: ``env -i sleep 30``
    reads the same before ``env`` exec's ``sleep``)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if processes._comm(pid) == comm:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} never ran {needle}")


def test_a_process_started_after_a_sweep_is_found_and_an_unmarked_one_never():
    before = processes.marked_processes()
    plain = subprocess.Popen(["sleep", "30"])
    marked = _marked(processes.marker_env("w9"), ["sleep", "30"])
    try:
        found = processes.marked_processes()
        assert marked.pid in found and marked.pid not in before
        assert plain.pid not in found
        assert processes.marked_processes(exclude={marked.pid}) == [p for p in found if p != marked.pid]
    finally:
        for p in (plain, marked):
            p.kill()
            p.wait()
    assert marked.pid not in processes.marked_processes()      # gone (reaped): not found


def test_a_marked_process_that_execs_without_its_environment_stays_found(tmp_path):
    """Read once with the marker, then ``exec env -i``: its /proc/<pid>/environ holds no marker now,
    and the sweep still counts it as the run's (the cgroup marker finds it too, where there is one)."""
    go = tmp_path / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.01; done; exec env -i sleep 30"
    child = _marked(processes.marker_env("w9"), ["sh", "-c", script])
    try:
        assert child.pid in processes.marked_processes()
        go.touch()
        _wait_exec(child.pid, "sleep")
        with open(f"/proc/{child.pid}/environ", "rb") as f:
            assert processes.MARKER_ENV.encode() not in f.read()       # its environment holds no marker now
        assert child.pid in processes.marked_processes()
    finally:
        child.kill()
        child.wait()


def test_a_process_read_before_it_was_owned_is_read_again(monkeypatch):
    """A process the harness starts is read before its exec only in a window the sweep cannot see
    (``starting``); ``own`` forgets what was read, so the environment it exec'd with is what counts."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid not in processes.marked_processes()
        key = next(k for k in processes._seen if k[0] == child.pid)
        processes._seen[key] = (processes.run_nonce().encode(),)      # as if read with the marker
        assert child.pid in processes.marked_processes()
        processes.own(child.pid)
        processes.disown(child.pid)
        assert child.pid not in processes.marked_processes()           # read again: no marker
    finally:
        child.kill()
        child.wait()
