"""``rope_kv_write`` kernels whose helpers escape the worker's process group, as careless libraries do:
a background daemon started in a session of its own, a double-forked "detach" helper.  Each
computes the right answer first.  Where ``HOSTILE_PIDS`` names a directory, each escaped process
writes its pid there (``<name>.pid``), so a test can check that it is gone."""
from __future__ import annotations

import os
import subprocess
import time

from harness.kernels.reference import rope_kv_write as _reference


def _note_pid(name: str, pid: int) -> None:
    where = os.environ.get("HOSTILE_PIDS")
    if where:
        with open(os.path.join(where, f"{name}.pid"), "w") as f:
            f.write(str(pid))


def daemon_in_new_session(**args):
    """A telemetry daemon a library starts and forgets: ``start_new_session=True``, outputs inherited."""
    out = _reference(**args)
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True, stdin=subprocess.DEVNULL)
    _note_pid("daemon", proc.pid)
    return out


def detached_writer(**args):
    """The classic daemonize (fork, setsid, fork): the grandchild keeps every descriptor the worker
    had, waits until the case has been answered, then writes into all of them."""
    out = _reference(**args)
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            _note_pid("writer", os.getpid())
            time.sleep(0.3)
            for fd in range(3, 256):
                try:
                    os.write(fd, b"\xff\xfegarbage from a detached helper\n" * 4)
                except OSError:
                    continue
            time.sleep(600)
        os._exit(0)
    os.waitpid(first, 0)
    return out


def finalizer_starts_daemon(**args):
    """A finalizer on an input buffer forks a daemon into a session of its own when the harness
    drops the buffer: the process appears after the case was checked and answered, and holds
    every descriptor the worker had (multiprocessing's resource tracker pipe included)."""
    import weakref

    def start():
        pid = os.fork()
        if pid == 0:
            os.setsid()
            time.sleep(600)
            os._exit(0)
        _note_pid("late", pid)

    out = _reference(**args)
    weakref.finalize(args["k_cache"], start)
    return out
