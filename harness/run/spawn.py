"""Starting the run's helper processes: the device workers and the golden process.

Both are started the same two ways, and this module is that shared machinery (it knows
neither ``harness.run.pool`` nor ``harness.run.golden_process``, which build on it):
forked from the CPU zygote (``zygote``, ``fork_from_zygote``: a forkserver that imported
``ZYGOTE_PRELOAD`` and ran nothing), or spawned fresh from the one long-lived ``spawner``
thread.  A started process is a ``WorkerProcess``: its pipe, its end seen on a pidfd
(``open_pidfd``; ``ForkedProc`` for a forked one), messages with bounded waits, and a stop
that takes its whole process group.  ``WorkerOptions`` is what both are started with, and
``expand_kernel_paths`` / ``source_root`` build the ``PYTHONPATH`` they get.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import multiprocessing
import multiprocessing.connection
import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from harness import trace
from harness.errors import HarnessError
from harness.logs import LOG_CAP_BYTES
from harness.processes import (TERM_GRACE_S, disown, helper_output, kill_group, kill_tree, marker_env, own,
                               process_state, starting, terminate)
from harness.worker import protocol


@functools.cache
def source_root() -> str | None:
    """The checkout to put on the workers' PYTHONPATH when the harness is not installed.

    Installed (a wheel, or ``pip install -e``), the harness is importable as it is, and
    putting the checkout on the path would shadow a user's own top-level ``kernels`` or
    ``goldens`` package with the folders of the same name there.
    """
    try:
        importlib.metadata.distribution("fused-kernel-harness")
        return None
    except importlib.metadata.PackageNotFoundError:
        return str(Path(__file__).resolve().parents[2])


STARTUP_ATTEMPTS = 3
_MESSAGE_S = 10.0           # a message whose first byte arrived is whole within this, or it is not one
_DEATH_POLL_S = 0.1         # where a process has no sentinel to wait on
_STOP_POLL_S = 0.5          # how often a waited-for process is checked for being stopped (SIGSTOP)
_STATUS_GRACE_S = 0.5       # how long the forkserver gets to report a forked process's status once it ended


# OpenMP threads that spin while they wait for work: with the front end, the golden process,
# a worker and anything else on the host sharing its cores, spinning threads take the cores
# the working ones need (a 600 MB integer sum: 0.2 s alone, 7 s at load average 8 with two
# spinning threads, 0.23 s with them sleeping).  A user's own setting wins.
THREADING_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


@dataclass
class WorkerOptions:
    log_dir: Path
    golden_cache: str = ""               # "" keeps goldens for this run only (the golden process's own directory)
    golden_dtype: str = "fp32"
    golden_device: str = "cpu"           # where the golden process draws inputs and computes goldens (cpu, cuda:0)
    kernel_paths: tuple[str, ...] = ()   # prepended to the inherited PYTHONPATH
    startup_timeout_s: float = 300.0
    rules: tuple | None = None           # classifier rules (built-ins + project + --rules); None: built-ins
    fork_cpu_workers: bool = True        # cpu workers forked from a preloaded zygote (see ZYGOTE_PRELOAD)
    max_log_bytes: int = LOG_CAP_BYTES   # each case log cut to its head and tail past this (logs.cap_log)
    rss_growth_warn_bytes: int = 1 << 30  # a worker whose RSS grew this much across cases: a warning
    device_logs: bool = False            # capture the runtime's log files on every device (always on npu)
    blocking_rerun: bool = True          # a DEVICE_FAULT / ORCH_ERROR on an accelerator is re-run launch-blocking
    base_env: dict[str, str] = field(default_factory=lambda: {**THREADING_ENV, **os.environ})
    worktree: str | None = None          # the ref's worktree (compare, bisect): a command case's {worktree} and cwd
    intermediates: str = "on-failure"    # off | on-failure | always (docs/intermediates.md)
    isolation: str = "warm"              # warm | case: a fresh worker for every case (pool.ISOLATION_MODES)


WORKTREE = "{worktree}"


@functools.lru_cache(maxsize=None)
def checkout_top(where: str) -> str | None:
    """The top of the git checkout ``where`` is in (None outside one)."""
    try:
        done = subprocess.run(["git", "-C", where, "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def expand_kernel_paths(paths: tuple[str, ...], worktree: str | None) -> tuple[str, ...]:
    """``--kernel-path {worktree}/python``: the ref's worktree (compare, bisect, flake --ref), or
    without a ref the top of the checkout the current directory is in (docs/refs.md)."""
    if not any(WORKTREE in p for p in paths):
        return paths
    top = worktree or checkout_top(os.getcwd()) or os.getcwd()
    return tuple(p.replace(WORKTREE, top) for p in paths)


class WorkerStartError(HarnessError):
    """A worker or the golden process did not start (after ``STARTUP_ATTEMPTS``, or a zygote that cannot fork)."""


# The CPU zygote: a forkserver that has imported these and run nothing, so a replacement
# worker is a fork (tens of ms), not a fresh torch import (seconds); a CPU run's golden
# process is forked from it too (harness.run.golden_process).  Accelerator workers
# are always spawned fresh: importing torch can load a device runtime (torch-npu is
# autoloaded by `import torch`), and a process must never fork after that.
ZYGOTE_PRELOAD = ["torch", "harness.goldens", "harness.goldens.cache", "harness.worker.execute",
                  "harness.worker.serve", "harness.worker.golden_serve", "harness.kernels.reference"]
_zygote_lock = threading.Lock()
_zygote_context = None


def zygote(log_dir: Path):
    """The forkserver context, its server started on first use with its output (and the resource
    tracker's) in ``log_dir/zygote-<pid>.log``: neither holds the front end's stdout or stderr, so
    a pipeline reading the harness (``harness run ... | cat``) ends with the harness."""
    global _zygote_context
    with _zygote_lock:
        if _zygote_context is None:
            # the forkserver takes this process's environment, and OpenMP reads it when torch loads there
            for key, value in THREADING_ENV.items():
                os.environ.setdefault(key, value)
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(ZYGOTE_PRELOAD)
            from multiprocessing import forkserver
            log_dir.mkdir(parents=True, exist_ok=True)
            # the zygote and the resource tracker carry the run's marker, and so does all that is forked from them
            with helper_output(log_dir / f"zygote-{os.getpid()}.log", env={**os.environ, **marker_env()}):
                forkserver.ensure_running()
            _zygote_context = ctx
        return _zygote_context


def zygote_unfit() -> str | None:
    """Why the running zygote cannot fork now (stopped by a signal, gone); None when it can, or when
    none runs yet.  A stopped forkserver accepts no connection, so a fork from it would wait forever."""
    from multiprocessing import forkserver
    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid is None:
        return None
    state = process_state(pid)
    if state in ("T", "t"):
        return f"the zygote (pid {pid}) was stopped"
    if state in ("", "Z", "X"):
        return f"the zygote (pid {pid}) died"
    return None


def restart_zygote(log_dir: Path, why: str) -> None:
    """End the zygote this process started (SIGKILL by its pid: a stopped one ignores the request to
    exit) and start a fresh one.  What was forked from it dies with it (its parent-death signal)."""
    global _zygote_context
    from multiprocessing import forkserver
    server = forkserver._forkserver
    with _zygote_lock:
        pid = server._forkserver_pid
        trace.log.debug("zygote pid %s: restarting it: %s", pid, why)
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                server._stop()
            except (OSError, ChildProcessError):      # reaped already: forget it by hand
                if server._forkserver_alive_fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(server._forkserver_alive_fd)
                server._forkserver_alive_fd = server._forkserver_pid = server._forkserver_address = None
        _zygote_context = None
    zygote(log_dir)


_start_lock = threading.Lock()


@contextlib.contextmanager
def _main_left_out():
    """multiprocessing has every child it starts import the parent's ``__main__`` again (the
    ``harness`` CLI with all its commands, or pytest) before its target runs: a third of a second
    per fork on a loaded host, most of a forked worker's start.  The targets here are functions of
    modules the zygote preloaded, so the child needs none of it: the main module is left out of what
    the child is told to prepare."""
    from multiprocessing import spawn
    with _start_lock:
        original = spawn.get_preparation_data

        def without_main(name):
            data = original(name)
            data.pop("init_main_from_name", None)
            data.pop("init_main_from_path", None)
            return data

        spawn.get_preparation_data = without_main
        try:
            yield
        finally:
            spawn.get_preparation_data = original


def fork_from_zygote(log_dir: Path, target, name: str, args: tuple):
    """``target(child_conn, *args)`` in a process forked from the zygote: (process, parent_conn).  A
    zygote that was stopped or killed (from outside, or by a kernel: ``os.kill(os.getppid(), SIGSTOP)``)
    is replaced first, and once more when the fork itself fails; never an EOFError, never a wait on a
    stopped zygote."""
    last = ""
    for _ in range(2):
        why = zygote_unfit()
        if why:
            restart_zygote(log_dir, why)
        ctx = zygote(log_dir)
        parent_conn, child_conn = ctx.Pipe()
        process = ctx.Process(target=target, name=name, args=(child_conn, *args))
        try:
            with starting(), _main_left_out():       # owned before a sweep can see it
                process.start()
                own(process.pid)
        except (EOFError, OSError) as exc:       # the zygote died while forking
            parent_conn.close()
            child_conn.close()
            last = f"{type(exc).__name__}: {exc}"
            restart_zygote(log_dir, f"a fork failed: {last}")
            continue
        child_conn.close()
        return process, parent_conn
    raise WorkerStartError(f"the zygote could not fork {name}: {last}")


@functools.cache
def spawner() -> ThreadPoolExecutor:
    """The one long-lived thread that starts spawned workers: a worker's parent-death signal
    fires when the thread that started it ends, and the device threads end with each run."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-spawner")


class ForkedProc:
    """A forked worker (``multiprocessing.Process``) behind the part of ``Popen`` the pool uses.

    Its end is seen on its own pid (a pidfd), not only through the forkserver: a zygote that was
    stopped never reports a child's status, and a wait on that report would never return.  A status
    the forkserver cannot give (stopped, or dead: it then says 255) is 255 with ``lost_status``."""

    def __init__(self, process):
        self._p = process
        self.pid = process.pid
        self._pidfd = open_pidfd(self.pid)
        self.sentinel = self._pidfd if self._pidfd is not None else process.sentinel   # readable once it has ended
        self.lost_status = False
        self._code: int | None = None

    def _ended(self) -> bool:
        if self._pidfd is None:
            return False
        return bool(multiprocessing.connection.wait([self._pidfd], 0))

    def poll(self) -> int | None:
        if self._code is None:
            code = self._p.exitcode
            if code is None and self._ended():
                self._p.join(_STATUS_GRACE_S)         # the forkserver's report follows the end at once
                code = self._p.exitcode
                if code is None:
                    code, self.lost_status = 255, True
            elif code == 255 and zygote_unfit():
                self.lost_status = True
            self._code = code
        return self._code

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            code = self.poll()
            if code is not None:
                return code
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("harness.worker.serve (forked)", timeout)
            multiprocessing.connection.wait([self.sentinel], _STOP_POLL_S if left is None else min(left, _STOP_POLL_S))

    def terminate(self) -> None:
        self._p.terminate()

    def kill(self) -> None:
        self._p.kill()

    def release(self) -> None:
        """Close the pidfd (once the process is stopped and waited for)."""
        if self._pidfd is not None:
            self.poll()
            os.close(self._pidfd)
            self._pidfd = None


def open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):      # not Linux, or Linux < 5.3: polled instead
        return None


@dataclass
class WorkerProcess:
    """One started worker process and its end of the pipe."""

    proc: "subprocess.Popen | ForkedProc"
    conn: Connection
    env_key: tuple
    log_path: Path
    name: str                      # the owning DeviceWorker's, for the trace
    sentinel: int | None = None    # readable once the process has ended (None: poll it)
    own_sentinel: bool = False     # a pidfd this side opened, closed with the process
    device_logs: str | None = None  # where its device runtime writes logs, when they are captured
    own_device_logs: bool = True   # the harness's own directory (not the user's, shared with others)
    # stop() may come from two threads at once (a run closing while a request waits on the process):
    # the pipe and the pidfd must be closed once, or the second close may hit a reused descriptor.
    _stopping: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stopped: bool = False
    halted: bool = False           # ``wait`` found it stopped by a signal (T state): it will never answer

    def send(self, message: protocol.Message) -> None:
        size = protocol.send(self.conn, message)
        trace.log.debug("%s pid %d: sent %s (%d bytes)", self.name, self.proc.pid, message.brief(), size)

    def receive(self, *expected: type[protocol.M]) -> protocol.M:
        message, size = protocol.receive(self.conn, *expected, within_s=_MESSAGE_S)
        trace.log.debug("%s pid %d: received %s (%d bytes)", self.name, self.proc.pid, message.brief(), size)
        return message

    def wait(self, timeout_s: float) -> bool:
        """Until a message is there (True), the process has ended, or ``timeout_s`` (False).

        Watches the process itself, not only the pipe: a child the kernel forked keeps
        the pipe open after the worker's death, and no end-of-file ever comes.
        """
        deadline = time.monotonic() + timeout_s
        waits = [self.conn] + ([self.sentinel] if self.sentinel is not None else [])
        while True:
            if self.conn.poll(0):
                return True
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                return False
            if process_state(self.proc.pid) in ("T", "t"):      # SIGSTOP: no answer will come
                self.halted = True
                return False
            multiprocessing.connection.wait(waits, min(left, _STOP_POLL_S) if self.sentinel is not None
                                            else min(left, _DEATH_POLL_S))

    def stop(self, force: bool = False) -> None:
        with self._stopping:
            if not self._stopped:
                self._stopped = True
                self._stop(force)

    def _stop(self, force: bool) -> None:
        try:
            if not force and self.proc.poll() is None:
                try:
                    self.send(protocol.Stop())
                    self.proc.wait(timeout=TERM_GRACE_S)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            # what the kernel started in sessions of its own: below the worker (a subreaper) while it lives
            kill_tree(self.proc.pid)
            terminate(self.proc, group=True)
            kill_group(self.proc.pid)      # what the kernel started: children, a forked child holding the pipe
        finally:
            disown(self.proc.pid)
            self.conn.close()
            release = getattr(self.proc, "release", None)
            if release is not None:
                release()
            if self.own_sentinel:
                os.close(self.sentinel)
                self.own_sentinel = False
