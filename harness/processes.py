"""Ending a child process: SIGTERM, a grace period, then SIGKILL (native code may ignore SIGTERM);
whatever is left of its process group; and every process below one (``kill_tree``: what a kernel
started in a session of its own, found through /proc under a subreaper)."""
from __future__ import annotations

import atexit
import contextlib
import functools
import os
import secrets
import signal
import subprocess
import threading
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
def helper_output(log_path: "os.PathLike[str] | str", env: "dict[str, str] | None" = None) -> Iterator[None]:
    """multiprocessing's helper processes started in this block (its forkserver, its resource
    tracker) get ``/dev/null`` as stdin and ``log_path`` as stdout and stderr instead of this
    process's own: a helper that outlives a run (a kernel's orphan holds the tracker's pipe)
    must not hold the pipe a CI job reads the harness's output from.

    multiprocessing starts both through ``multiprocessing.util.spawnv_passfds``, which keeps
    fds 0-2; it is swapped for the block (the caller holds a lock) for the same start with
    ``subprocess``.  ``env``: their environment (the run's marker added), else this process's."""
    from multiprocessing import util
    original = util.spawnv_passfds

    def spawn(path, args, passfds):
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(list(args), executable=path, pass_fds=tuple(sorted(map(int, passfds))),
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True,
                                    restore_signals=False, env=env)
        _HELPERS.append(proc)
        return proc.pid

    util.spawnv_passfds = spawn
    try:
        yield
    finally:
        util.spawnv_passfds = original


# ---------------------------------------------------------------------------
# The run's marker: every process the harness starts to run or judge kernels (the zygote and what
# is forked from it, spawned workers, the golden process, multiprocessing's resource tracker) has
# MARKER_ENV=<this front end's nonce> in its environment, and so does everything a kernel starts
# from them unless it builds an environment of its own.  A process that left the worker's tree
# (PR_SET_CHILD_SUBREAPER turned off then a double fork, clone(CLONE_PARENT), a setsid) is still
# found by it: /proc/<pid>/environ of the processes of this uid, matched entry for entry, never a
# pattern on command lines.  docs/architecture.md, "Processes".
# ---------------------------------------------------------------------------

MARKER_ENV = "HARNESS_RUN_NONCE"


@functools.cache
def run_nonce() -> str:
    """This front end's nonce: one per process (a CLI invocation, a pytest session or xdist worker),
    never inherited (a harness run inside a command case gets its own)."""
    return secrets.token_hex(16)


def marker_env(worker: str | None = None) -> dict[str, str]:
    """The run's marker; a device worker's carries its name too (``<nonce>.<worker>``), so a process
    its kernel left behind is told from one another worker's kernel left (``sweep(worker=...)``)."""
    return {MARKER_ENV: run_nonce() if worker is None else f"{run_nonce()}.{worker}"}


def worker_comm(marker: str) -> str:
    """The name (``/proc/<pid>/comm``, 15 bytes) a forked worker gives itself from its marker: its
    environment block is the zygote's, with the bare run marker, and so is that of a copy of it a
    kernel forks without exec; the name is what such a copy keeps of its worker
    (harness/worker/serve.py sets it, ``tests/workers/test_escaped_processes.py`` holds the two equal)."""
    return ("harness." + marker.rpartition(".")[2])[:15]


_own_lock = threading.RLock()
_own: set[int] = set()       # live processes the harness started (workers, spares, golden processes)


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """Hold while a marked process is started and ``own``ed: a sweep in another thread waits, so a
    process being forked is never taken for an escaped one."""
    with _own_lock:
        yield


def own(pid: int) -> None:
    with _own_lock:
        _own.add(pid)
        for key in [k for k in _seen if k[0] == pid]:      # read before its exec: read again
            del _seen[key]


def disown(pid: int) -> None:
    with _own_lock:
        _own.discard(pid)


def _markers_in(pid: int) -> tuple[bytes, ...]:
    """The values of ``MARKER_ENV`` in the process's environment (usually none or one); none when it
    cannot be read (gone, a kernel thread, or not ours to read: the second marker's business)."""
    prefix = f"{MARKER_ENV}=".encode()
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return ()
    return tuple(e[len(prefix):] for e in data.split(b"\0") if e.startswith(prefix))


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def belongs_to(pid: int, worker: str) -> bool:
    """A marked process is ``worker``'s: its environment holds that worker's marker (anything it
    exec'd, or a copy of a spawned worker), or the bare run marker with the worker's name (a copy of a
    forked worker that never exec'd); or, whatever its environment, it is in that worker's cgroup or
    session (``enter``)."""
    own = f"{run_nonce()}.{worker}"
    if _in_worker_cgroup(pid, worker) or _sessions.get(session_id(pid)) == worker:
        return True
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return False
    if f"{MARKER_ENV}={own}".encode() in entries:
        return True
    return f"{MARKER_ENV}={run_nonce()}".encode() in entries and _comm(pid) == worker_comm(own)


# What each process's environment held when first read, by pid and the inode of its /proc/<pid>
# directory (a new process under a reused pid has a new inode; exec keeps both): the sweep after
# every case reads only the processes that are new since the last, not every environment of the uid
# (~30% of the front end's time on a tiny case).  /proc/<pid>/environ is what the process was started
# or exec'd with (it may overwrite that memory, as setproctitle does: what was first read is kept);
# a process that exec's without the marker after it was seen with it stays marked (it came from a
# kernel), and one the harness starts is forgotten as it is ``own``ed (its exec comes after the fork
# a sweep could have read).  One unreadable when first seen (undumpable, another uid's) stays unread:
# the worker's cgroup or session is what finds such a process (``_unmarked``).
_seen: dict[tuple[int, int], tuple[bytes, ...]] = {}


def marked_processes(nonce: str | None = None, exclude: "set[int] | frozenset[int]" = frozenset()) -> list[int]:
    """The running processes of this uid whose environment holds ``MARKER_ENV=nonce`` or a worker's
    ``MARKER_ENV=nonce.<worker>`` (this front end's nonce by default); zombies and ``exclude`` left
    out.  Empty where there is no /proc."""
    global _seen
    value = (nonce or run_nonce()).encode()
    uid, found, seen = os.getuid(), [], {}
    try:
        entries = [e for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return []
    for entry in entries:
        pid = int(entry.name)
        try:
            key = (pid, entry.inode())
        except OSError:
            continue
        markers = _seen.get(key)
        if markers is None:
            try:
                ours = os.stat(entry.path).st_uid == uid
            except OSError:
                continue
            markers = _markers_in(pid) if ours else ()
        seen[key] = markers
        if (markers and pid not in exclude and any(m == value or m.startswith(value + b".") for m in markers)
                and process_state(pid) not in ("Z", "X", "")):
            found.append(pid)
    _seen = seen
    return found


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            text = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        text = ""
    return text[:120] or "?"


def helper_pids() -> set[int]:
    """The zygote and multiprocessing's resource tracker of this front end: the harness's own, marked,
    and needed by the next run in this process."""
    pids: set[int] = set()
    from multiprocessing import forkserver, resource_tracker
    for pid in (getattr(forkserver._forkserver, "_forkserver_pid", None),
                getattr(resource_tracker._resource_tracker, "_pid", None)):
        if pid:
            pids.add(pid)
    return pids


# ---------------------------------------------------------------------------
# The second marker: what a kernel's process keeps whatever environment it execs with, and what can
# be read of it even when its /proc/<pid>/environ cannot (PR_SET_DUMPABLE 0, another uid):
# - a cgroup (v2) per device worker, below one per run, made in the front end's own cgroup where the
#   cgroup2 hierarchy is writable there (``run_cgroup``): each worker is moved into its worker's
#   cgroup as it starts (``enter``), and everything it forks is born in it; a process leaves it only by
#   writing itself into another cgroup, which takes write access to the hierarchy (root, here);
# - else the worker's session: every worker takes a session of its own before any kernel runs, so its
#   pid is the session id of everything it starts that does not call setsid (``session_id``).
# ---------------------------------------------------------------------------

_sessions: dict[int, str] = {}     # session id (a worker's pid) -> the worker's name
_cgroups: dict[str, str] = {}      # worker name -> its cgroup's directory (where a worker entered one)
_cgroup_run: list[str | None] = [None]      # the run's cgroup directory; "" once none could be made


def _cgroup2_base() -> str | None:
    """The directory of this process's own cgroup in the cgroup v2 hierarchy (a hybrid host mounts
    it at /sys/fs/cgroup/unified); None where there is none."""
    try:
        with open("/proc/self/cgroup") as f:
            own = next((line[3:].strip() for line in f if line.startswith("0::")), None)
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    if own is None:
        return None
    for fields in mounts:
        if "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        if fields[dash + 1:dash + 2] != ["cgroup2"]:
            continue
        root, point = fields[3], fields[4]
        if root != "/":
            if own != root and not own.startswith(root + "/"):
                continue
            own = own[len(root):]
        return point + own.rstrip("/")
    return None


# ``off``: make no cgroup (a host whose cgroups another manager owns, such as a systemd scope that
# was not delegated); strays are then found by their environment and session only.
CGROUP_ENV = "HARNESS_CGROUP"


def run_cgroup() -> str | None:
    """This front end's cgroup (``harness-<pid>-<nonce>`` in its own), made on first use; None where
    none can be made (no cgroup2 hierarchy, or not writable there) or ``$HARNESS_CGROUP`` is off."""
    with _own_lock:
        if _cgroup_run[0] is None:
            _cgroup_run[0] = ""
            off = os.environ.get(CGROUP_ENV, "").strip().lower() in ("off", "0", "no", "false")
            base = None if off else _cgroup2_base()
            if base is not None:
                path = os.path.join(base, f"harness-{os.getpid()}-{run_nonce()[:16]}")
                _remove_stale_cgroups(base)
                try:
                    os.makedirs(path, exist_ok=True)
                    _cgroup_run[0] = path
                    atexit.register(remove_cgroups)
                except OSError as exc:
                    trace.log.debug("no cgroup for this run (%s: %s): strays are found by their environment and "
                                    "session only", path, exc)
        return _cgroup_run[0] or None


def _remove_stale_cgroups(base: str) -> None:
    """The empty cgroups of front ends that ended without removing them (killed with SIGKILL)."""
    try:
        names = [n for n in os.listdir(base) if n.startswith("harness-")]
    except OSError:
        return
    for name in names:
        try:
            os.kill(int(name.split("-")[1]), 0)
            continue                                  # its front end still runs
        except ProcessLookupError:
            pass
        except (OSError, ValueError, IndexError):
            continue
        with contextlib.suppress(OSError):
            for cgroup in reversed(_cgroup_tree(os.path.join(base, name))):
                os.rmdir(cgroup)                          # fails while a process is in it


def enter(pid: int, worker: str) -> None:
    """A device worker just started (it takes a session of its own before any kernel runs): what it
    starts is ``worker``'s by its session, and by its cgroup where one can be made (it is moved there
    now, before its first case)."""
    with _own_lock:
        _sessions[pid] = worker
    base = run_cgroup()
    if base is None:
        return
    path = os.path.join(base, worker)
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(pid))
    except OSError as exc:
        trace.log.debug("pid %d not moved into cgroup %s: %s", pid, path, exc)
        return
    with _own_lock:
        _cgroups[worker] = path


def remove_cgroups() -> None:
    """Remove the run's cgroups that are empty (the run has ended; one still holding a process stays)."""
    with _own_lock:
        for worker, path in list(_cgroups.items()):
            with contextlib.suppress(OSError):
                for cgroup in reversed(_cgroup_tree(path)):
                    os.rmdir(cgroup)
                del _cgroups[worker]
        if _cgroup_run[0]:
            with contextlib.suppress(OSError):
                os.rmdir(_cgroup_run[0])


def _cgroup_tree(path: str) -> list[str]:
    """``path`` and the cgroups below it (a kernel's process with write access may make one), deepest
    last."""
    found, todo = [], [path]
    while todo:
        here = todo.pop()
        found.append(here)
        try:
            todo += [entry.path for entry in os.scandir(here) if entry.is_dir(follow_symlinks=False)]
        except OSError:
            continue
    return found


def _cgroup_members(worker: str | None) -> set[int]:
    """The processes in ``worker``'s cgroup or below it (every worker's with None), zombies left out."""
    found: set[int] = set()
    for name, path in list(_cgroups.items()):
        if worker is not None and name != worker:
            continue
        for cgroup in _cgroup_tree(path):
            try:
                with open(os.path.join(cgroup, "cgroup.procs")) as f:
                    found.update(int(p) for p in f.read().split())
            except (OSError, ValueError):
                continue
    return {p for p in found if process_state(p) not in ("Z", "X", "")}


def _in_worker_cgroup(pid: int, worker: str) -> bool:
    path = _cgroups.get(worker)
    if path is None:
        return False
    tail = "/" + os.path.basename(os.path.dirname(path)) + "/" + worker
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            return any(line.startswith("0::") and (line.rstrip("\n").endswith(tail) or tail + "/" in line)
                       for line in f)
    except OSError:
        return False


def session_id(pid: int) -> int:
    """The session id of ``pid`` (``getsid``: a system call, allowed on Linux for any process, whatever
    its owner or dumpable flag); -1 when it is gone."""
    try:
        return os.getsid(pid)
    except OSError:
        return -1


def _session_members(sessions: set[int]) -> set[int]:
    """The running processes (any uid) whose session is one of ``sessions``: one ``getsid`` per
    process (~0.2 ms for 80 processes; reading each /proc/<pid>/stat took 1-2 ms)."""
    found: set[int] = set()
    if not sessions:
        return found
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if name.isdigit() and session_id(int(name)) in sessions:
            found.add(int(name))
    return {p for p in found if process_state(p) not in ("Z", "X", "")}


def _unmarked(worker: str | None) -> set[int]:
    """The processes of the workers' cgroups, and, for a worker with no cgroup, of its sessions (the
    second marker: an environment of their own making does not take them out); a session whose
    processes have all ended is forgotten (its number may be a new process's pid then)."""
    found = _cgroup_members(worker)
    sessions = {sid for sid, name in _sessions.items()
                if (worker is None or name == worker) and name not in _cgroups}
    members = _session_members(sessions)
    found |= members
    live = {session_id(p) for p in members}
    for sid, name in list(_sessions.items()):
        if (worker is None or name == worker) and sid not in live and process_state(sid) in ("Z", "X", ""):
            del _sessions[sid]
    return found


_DYING_GRACE_S = 0.3
_unkillable: set[int] = set()      # strays the sweep may not signal, named once


def sweep(keep: set[int] = frozenset(), worker: str | None = None) -> list[str]:
    """SIGKILL every marked process (its environment, or a worker's cgroup or session: ``enter``) that
    is not this front end, one of its helpers, a process it started and still runs (``own``), ``keep``,
    or below one of those (a running case's children are its worker's business); returns ``pid N
    (command line)`` for each, to be reported (one it may not signal, once, with "not killed").
    ``worker``: only that worker's (``belongs_to``), the others left to their own worker's sweep or the
    run's last.  A worker just stopped, and what was below it, were sent SIGKILL already and are gone
    within moments: what is found is given ``_DYING_GRACE_S`` to end before it counts."""
    with _own_lock:
        spared = {os.getpid(), *helper_pids(), *_own, *keep}
        for pid in list(_own):
            spared.update(descendants(pid))
        killed: list[str] = []
        signalled: set[int] = set()
        for round_ in range(_KILL_ROUNDS):     # what a killed one forked meanwhile is found on the next pass
            strays = sorted(p for p in {*(p for p in marked_processes(exclude=spared)
                                          if worker is None or belongs_to(p, worker)),
                                        *_unmarked(worker)} if p not in spared)
            if strays and round_ == 0:
                deadline = time.monotonic() + _DYING_GRACE_S
                while strays and time.monotonic() < deadline:
                    time.sleep(0.005)
                    strays = [p for p in strays if process_state(p) not in ("Z", "X", "")]
            strays = [p for p in strays if p not in signalled]
            if not strays:
                break
            for pid in strays:
                line = f"pid {pid} ({command_line(pid)})"
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                except PermissionError:        # another uid's (a setuid program): named once, not killed
                    if pid not in _unkillable:
                        _unkillable.add(pid)
                        killed.append(f"{line} (not killed: not permitted)")
                    continue
                signalled.add(pid)
                killed.append(line)
            reap(strays, within_s=0.2)         # a clone(CLONE_PARENT) of a spawned worker is our child
            deadline = time.monotonic() + 1.0  # gone before the next pass looks (a SIGKILL is not instant)
            while time.monotonic() < deadline and any(process_state(p) not in ("Z", "X", "") for p in strays):
                time.sleep(0.005)
    if worker is None:           # the run's end: its cgroups go once empty
        remove_cgroups()
    if killed:
        trace.log.debug("SIGKILL to %d process(es) carrying this run's marker outside its workers: %s",
                        len(killed), "; ".join(killed))
    return killed
