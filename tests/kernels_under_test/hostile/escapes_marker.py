"""``rope_kv_write`` kernels whose helpers leave the worker's process tree, not only its process group
(issue 37, item 4): the worker's subreaper and parent-death signal turned off before a double fork
with setsid, and a ``clone(CLONE_PARENT)`` child that becomes its worker's sibling.  Each computes
the right answer first; the helpers sleep for ten minutes."""
from __future__ import annotations

import ctypes
import os
import signal
import time

from harness.kernels.reference import rope_kv_write as _reference

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_CLONE_PARENT = 0x00008000
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def no_subreaper_double_fork(**args):
    """PR_SET_CHILD_SUBREAPER 0 and PR_SET_PDEATHSIG 0, then fork + setsid + fork: the grandchild goes
    to init, out of the worker's tree (a Python sleep, never exec'd)."""
    out = _reference(**args)
    libc = _libc()
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    libc.prctl(_PR_SET_PDEATHSIG, 0, 0, 0, 0)
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(600)
        os._exit(0)
    os.waitpid(first, 0)
    return out


def clone_parent(**args):
    """A child made with clone(CLONE_PARENT): the worker's parent's child (the zygote's, or the front
    end's for a spawned worker), in a session of its own, exec'ing sleep."""
    out = _reference(**args)
    number = _SYS_CLONE.get(os.uname().machine)
    if number is None:
        return out
    pid = _libc().syscall(number, _CLONE_PARENT | signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:                          # the child: a copy of this thread only; exec at once
        try:
            os.setsid()
            os.execv("/bin/sleep", ["sleep", "600"])
        finally:
            os._exit(1)
    return out


_PR_SET_DUMPABLE = 4


def _note_pid(name: str) -> None:
    where = os.environ.get("HOSTILE_PIDS")
    if where:
        with open(os.path.join(where, f"{name}.pid"), "w") as f:
            f.write(str(os.getpid()))


def _leave_the_tree(grandchild, *, new_session: bool = True) -> None:
    """Subreaper and parent-death signal off, then fork (+ setsid) + fork: ``grandchild()`` runs in a
    process that init adopts; it never returns."""
    libc = _libc()
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    libc.prctl(_PR_SET_PDEATHSIG, 0, 0, 0, 0)
    first = os.fork()
    if first == 0:
        try:
            if new_session:
                os.setsid()
            if os.fork() == 0:
                grandchild()
        finally:
            os._exit(0)
    os.waitpid(first, 0)


def _scrubbed_sleep() -> None:
    _note_pid("scrubbed")
    os.execv("/usr/bin/env", ["env", "-i", "sleep", "600"])    # `env -i`: not a variable of the worker's left


def scrubbed_env_double_fork(**args):
    """Out of the worker's tree (subreaper off, fork + setsid + fork), then ``env -i sleep 600``: no
    environment variable of the worker's, no session of the worker's."""
    out = _reference(**args)
    _leave_the_tree(_scrubbed_sleep)
    return out


def scrubbed_env_same_session(**args):
    """Out of the worker's tree (subreaper off, fork + fork, no setsid), then ``env -i sleep 600``."""
    out = _reference(**args)
    _leave_the_tree(_scrubbed_sleep, new_session=False)
    return out


def undumpable_double_fork(**args):
    """Out of the worker's tree (subreaper off, fork + setsid + fork), then PR_SET_DUMPABLE 0: its
    /proc/<pid>/environ is readable only with CAP_SYS_PTRACE (root's)."""
    out = _reference(**args)

    def hide() -> None:
        _libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
        _note_pid("undumpable")
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(600)
    _leave_the_tree(hide)
    return out


def cgroup_of_its_own(**args):
    """Out of the worker's tree (subreaper off, fork + setsid + fork), into a cgroup it makes below its
    worker's (root can), then ``env -i sleep 600``."""
    out = _reference(**args)

    def move() -> None:
        with open("/proc/self/cgroup") as f:
            own = next(line[3:].strip() for line in f if line.startswith("0::"))
        with open("/proc/self/mountinfo") as f:
            point = next(line.split()[4] for line in f if " - cgroup2 " in line)
        below = os.path.join(point + own, "hidden")
        os.makedirs(below, exist_ok=True)
        with open(os.path.join(below, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        _scrubbed_sleep()
    _leave_the_tree(move)
    return out
