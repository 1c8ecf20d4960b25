"""Ending a child process: SIGTERM, a grace period, then SIGKILL (native code may ignore SIGTERM);
whatever is left of its process group; and every process below one (``kill_tree``: what a kernel
started in a session of its own, found through /proc under a subreaper)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator

from harness import trace

TERM_GRACE_S = 3.0


def terminate(proc, *, group: bool = False, grace_s: float = TERM_GRACE_S) -> None:
    """Stop ``proc`` (a ``Popen``, or anything with its ``poll/wait/terminate/kill``; its whole
    process group with ``group``, for a child started in a session of its own) and reap it.
    Already gone is fine.  Each signal sent is traced."""
    if proc.poll() is not None:
        return
    target = f"process group {proc.pid}" if group else f"pid {proc.pid}"
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        trace.log.debug("%s: %s%s", target, sig.name,
                  f" (still running {grace_s:g}s after SIGTERM)" if sig is signal.SIGKILL else "")
        try:
            if group:
                os.killpg(proc.pid, sig)
            elif sig == signal.SIGTERM:
                proc.terminate()
            else:
                proc.kill()
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.poll()


def kill_group(pgid: int) -> None:
    """SIGKILL whatever is left in process group ``pgid`` (the processes a worker or a build started,
    after its leader is gone); an empty group is fine."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    trace.log.debug("process group %d: SIGKILL (what was left of it)", pgid)


def children(pid: int, tasks: list[str] | None = None) -> set[int]:
    """The running children of ``pid`` (Linux ``/proc``; an empty set elsewhere, or once it is gone);
    zombies (ended, not yet reaped) are left out.  ``tasks``: its thread ids, where the caller has
    listed them already."""
    if tasks is None:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return set()
    found: set[int] = set()
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            continue
    return {p for p in found if process_state(p) not in ("Z", "X", "")}


def process_state(pid: int) -> str:
    """One letter from /proc/PID/stat (Z: a zombie, ended but not reaped); "" when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return ""


def descendants(pid: int) -> list[int]:
    """Every running process below ``pid``: its children, theirs, and so on (parents first)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in sorted(children(todo.pop())):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


_KILL_ROUNDS = 5


def kill_tree(pid: int, *, include_self: bool = False) -> list[int]:
    """SIGKILL every process below ``pid`` (and ``pid`` itself with ``include_self``), walking again
    until none is left: a killed process's children go to the nearest subreaper, which is ``pid``
    when it is a device worker (``harness.worker.serve.become_subreaper``), so they are found on
    the next walk.  Returns the pids signalled.  Nothing to do where there is no /proc."""
    signalled: list[int] = []
    for _ in range(_KILL_ROUNDS):
        below = [p for p in descendants(pid) if p not in signalled]
        if not below:
            break
        for p in below:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
        signalled += below
    if include_self:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if signalled:
        trace.log.debug("pid %d: SIGKILL to %d process(es) below it: %s", pid, len(signalled),
                        ", ".join(map(str, signalled)))
    return signalled


def reap(pids: list[int], within_s: float = 1.0) -> None:
    """Wait (bounded) for those of ``pids`` that are this process's children, so a killed one does not
    stay a zombie; one the kernel already waited for, or not ours, is skipped."""
    deadline = time.monotonic() + within_s
    left = list(pids)
    while left:
        for p in list(left):
            try:
                done, _ = os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                done = p
            if done:
                left.remove(p)
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.005)


# multiprocessing's helper processes started under helper_output: kept so their Popen is never
# collected (a collected one is polled and could be reaped behind multiprocessing's back).
_HELPERS: list = []


@contextlib.contextmanager
def helper_output(log_path: "os.PathLike[str] | str") -> Iterator[None]:
    """multiprocessing's helper processes started in this block (its forkserver, its resource
    tracker) get ``/dev/null`` as stdin and ``log_path`` as stdout and stderr instead of this
    process's own: a helper that outlives a run (a kernel's orphan holds the tracker's pipe)
    must not hold the pipe a CI job reads the harness's output from.

    multiprocessing starts both through ``multiprocessing.util.spawnv_passfds``, which keeps
    fds 0-2; it is swapped for the block (the caller holds a lock) for the same start with
    ``subprocess``."""
    from multiprocessing import util
    original = util.spawnv_passfds

    def spawn(path, args, passfds):
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(list(args), executable=path, pass_fds=tuple(sorted(map(int, passfds))),
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True,
                                    restore_signals=False)
        _HELPERS.append(proc)
        return proc.pid

    util.spawnv_passfds = spawn
    try:
        yield
    finally:
        util.spawnv_passfds = original
