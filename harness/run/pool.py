"""The front end's side of a device worker: start, send a case, enforce its timeout, replace.

The worker is a separate process (``python -m harness.worker.serve``), started
fresh (never forked after torch is imported) with its own environment, and
spoken to over a socket pair with ``harness.worker.protocol`` messages.  This side owns
time: a case that does not answer within ``timeout_s`` gets its Python stacks
dumped, then SIGTERM, then SIGKILL, and the next case gets a fresh worker.
A worker that dies mid-case yields ``CRASH`` with its signal (its death is seen on
its pid, not on the pipe, which a child it forked may hold open); a reply that is
not one, or not this launch's, is ``CRASH`` "worker protocol corrupted"; a sticky
device fault, or a kernel that changed the process or left threads or processes
behind (``CaseReply.replace_worker``), replaces the worker before the next case.
A worker is stopped with its whole process group.  Every message, start,
replacement and signal is traced (``harness.trace``, silent unless enabled).
The case's goldens come from the run's golden process (``harness.run.golden_process``),
asked before the case is sent; the worker only reads the file it names.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import functools
import importlib.metadata
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from harness import trace
from harness.case import Case
from harness.classify.matching import Classification, classify_exception, classify_exit, classify_timeout, read_log
from harness.devices import Device
from harness.errors import HarnessError
from harness.logs import LOG_CAP_BYTES, cap_log
from harness.outcomes import Outcome, Result
from harness.processes import TERM_GRACE_S, kill_group, terminate
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
_STACK_DUMP_GRACE_S = 0.5
_MESSAGE_S = 10.0           # a message whose first byte arrived is whole within this, or it is not one
_DEATH_POLL_S = 0.1         # where a process has no sentinel to wait on


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
    base_env: dict[str, str] = field(default_factory=lambda: {**THREADING_ENV, **os.environ})
    intermediates: str = "on-failure"    # off | on-failure | always (docs/intermediates.md)


def worker_env(options: WorkerOptions, case_env: dict[str, str]) -> dict[str, str]:
    env = dict(options.base_env)
    paths = [*options.kernel_paths, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    if source_root():
        paths.append(source_root())
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update(case_env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _env_key(case_env: dict[str, str]) -> tuple:
    return tuple(sorted(case_env.items()))


def _env_text(env_key: tuple) -> str:
    return ",".join(f"{k}={v}" for k, v in env_key) or "-"


def case_fields(case: Case, repeat: int, device: Device, log: Path | None) -> dict:
    """The fields every result of ``case`` carries, whatever its outcome."""
    return dict(case_id=case.case_id, matrix=case.matrix, op=case.op, kernel=case.kernel, seed=case.seed,
                repeat=repeat, device=str(device), log=str(log) if log else None, params=dict(case.params))


def log_name(case_id: str, repeat: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.=,()+-]+", "_", case_id)[:180]
    return f"{safe}.r{repeat}.log"


class WorkerStartError(HarnessError):
    pass


# The CPU zygote: a forkserver that has imported these and run nothing, so a replacement
# worker is a fork (tens of ms), not a fresh torch import (seconds); a CPU run's golden
# process is forked from it too (harness.run.golden_process).  Accelerator workers
# are always spawned fresh: importing torch can load a device runtime (torch-npu is
# autoloaded by `import torch`), and a process must never fork after that.
ZYGOTE_PRELOAD = ["torch", "harness.goldens", "harness.goldens.cache", "harness.worker.execute",
                  "harness.worker.serve", "harness.worker.golden_serve", "harness.kernels.reference"]
_zygote_lock = threading.Lock()
_zygote_context = None


def zygote():
    global _zygote_context
    with _zygote_lock:
        if _zygote_context is None:
            # the forkserver takes this process's environment, and OpenMP reads it when torch loads there
            for key, value in THREADING_ENV.items():
                os.environ.setdefault(key, value)
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(ZYGOTE_PRELOAD)
            _zygote_context = ctx
        return _zygote_context


@functools.cache
def spawner() -> ThreadPoolExecutor:
    """The one long-lived thread that starts spawned workers: a worker's parent-death signal
    fires when the thread that started it ends, and the device threads end with each run."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-spawner")


class ForkedProc:
    """A forked worker (``multiprocessing.Process``) behind the part of ``Popen`` the pool uses."""

    def __init__(self, process):
        self._p = process
        self.pid = process.pid
        self.sentinel = process.sentinel     # readable once the process has ended

    def poll(self) -> int | None:
        return self._p.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._p.join(timeout)
        if self._p.exitcode is None:
            raise subprocess.TimeoutExpired("harness.worker.serve (forked)", timeout)
        return self._p.exitcode

    def terminate(self) -> None:
        self._p.terminate()

    def kill(self) -> None:
        self._p.kill()


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
    # stop() may come from two threads at once (a run closing while a request waits on the process):
    # the pipe and the pidfd must be closed once, or the second close may hit a reused descriptor.
    _stopping: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stopped: bool = False

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
            multiprocessing.connection.wait(waits, left if self.sentinel is not None else min(left, _DEATH_POLL_S))

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
            terminate(self.proc, group=True)
            kill_group(self.proc.pid)      # what the kernel started: children, a forked child holding the pipe
        finally:
            self.conn.close()
            if self.own_sentinel:
                os.close(self.sentinel)
                self.own_sentinel = False


class DeviceWorker:
    """The front end's handle on one device's worker process.

    After the first replacement (a hang, a crash, a sticky fault) a spare worker
    is kept starting in the background, so the next replacement costs nothing:
    a fault-prone matrix does not pay a torch import per fault.
    """

    def __init__(self, device: Device, options: WorkerOptions, name: str = "w0", goldens=None):
        """``goldens``: the run's ``GoldenProcess`` (the engine's, shared by its devices); None: one of its own."""
        from harness.run.golden_process import GoldenProcess     # it builds on this module's process helpers

        trace.enable(trace.enabled_by_env())       # HARNESS_DEBUG=1 traces the CLI and the pytest plugin alike
        self.device = device
        self.options = options
        self.name = name
        self._own_goldens = goldens is None
        self.goldens = goldens or GoldenProcess(options, fork=options.fork_cpu_workers and device.kind == "cpu")
        self.current: WorkerProcess | None = None
        self.spare: WorkerProcess | None = None
        self.absent: str | None = None
        self.info: dict = {}
        self.starts = 0           # processes started, spares included
        self.replacements = 0     # workers stopped because of a fault
        self._log_dirs: set[Path] = set()
        self.warnings: list[str] = []     # for the report: a worker that kept growing (a leaking kernel)
        self._rss: tuple[int, int, int, bool] | None = None  # pid, RSS after its first case, cases since, warned

    @property
    def proc(self) -> subprocess.Popen | ForkedProc | None:
        return self.current.proc if self.current else None

    # -- lifecycle -------------------------------------------------------------
    def _spawn(self, case_env: dict[str, str]) -> WorkerProcess:
        self.options.log_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        log_path = self.options.log_dir / f"worker-{self.name}-{str(self.device).replace(':', '')}-{self.starts}.log"
        if self.device.kind == "cpu" and self.options.fork_cpu_workers:
            return self._fork(case_env, log_path)
        parent_sock, child_sock = socket.socketpair()
        try:
            with open(log_path, "ab") as log_file:
                proc = spawner().submit(
                    subprocess.Popen,
                    [sys.executable, "-m", "harness.worker.serve", "--fd", str(child_sock.fileno()),
                     "--device", str(self.device), "--golden-dtype", self.options.golden_dtype,
                     "--front-end-pid", str(os.getpid())],
                    pass_fds=(child_sock.fileno(),), env=worker_env(self.options, case_env),
                    stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                    start_new_session=True,      # Ctrl-C reaches the front end only; killed as a group
                ).result()
        finally:
            child_sock.close()
        key = _env_key(case_env)
        trace.log.debug("%s: spawned pid %d for %s (env %s, log %s)", self.name, proc.pid, self.device,
                        _env_text(key), log_path)
        pidfd = open_pidfd(proc.pid)
        return WorkerProcess(proc, Connection(parent_sock.detach()), key, log_path, self.name, pidfd, pidfd is not None)

    def _fork(self, case_env: dict[str, str], log_path: Path) -> WorkerProcess:
        from harness.worker.serve import forked_main
        ctx = zygote()
        parent_conn, child_conn = ctx.Pipe()
        process = ctx.Process(
            target=forked_main, name=f"harness-worker-{self.name}",
            args=(child_conn, str(self.device), self.options.golden_dtype,
                  worker_env(self.options, case_env), str(log_path), os.getpid()),
        )
        process.start()
        child_conn.close()
        key = _env_key(case_env)
        trace.log.debug("%s: forked pid %d for %s from the zygote (env %s, log %s)", self.name, process.pid,
                        self.device, _env_text(key), log_path)
        forked = ForkedProc(process)
        return WorkerProcess(forked, parent_conn, key, log_path, self.name, forked.sentinel)

    def _await_ready(self, process: WorkerProcess) -> None:
        if not process.conn.poll(self.options.startup_timeout_s):
            trace.log.debug("%s pid %d: not ready within %gs", self.name, process.proc.pid,
                            self.options.startup_timeout_s)
            process.stop(force=True)
            raise WorkerStartError(f"worker for {self.device} did not start within "
                                   f"{self.options.startup_timeout_s:g}s (log: {process.log_path})")
        try:
            ready = process.receive(protocol.Ready)
        except (EOFError, OSError, protocol.ProtocolError):
            trace.log.debug("%s pid %d: died while starting", self.name, process.proc.pid)
            process.stop(force=True)
            tail = read_log(process.log_path)[-2000:].strip()
            raise WorkerStartError(
                f"worker for {self.device} died while starting (log: {process.log_path}): {tail}") from None
        self.absent, self.info = ready.absent, ready.info

    def ensure(self, case_env: dict[str, str]) -> None:
        key = _env_key(case_env)
        if self.current is not None and self.current.proc.poll() is None and self.current.env_key == key:
            return
        self.stop()
        last: Exception | None = None
        for _ in range(STARTUP_ATTEMPTS):
            spare, self.spare = self.spare, None
            if spare is not None and spare.env_key != key:
                trace.log.debug("%s: spare pid %d has another env; stopping it", self.name, spare.proc.pid)
                spare.stop(force=True)
                spare = None
            try:
                process = spare or self._spawn(case_env)
                self._await_ready(process)
            except WorkerStartError as exc:
                last = exc
                continue
            self.current = process
            if self.replacements:
                self.spare = self._spawn(case_env)
                trace.log.debug("%s: pid %d is the spare", self.name, self.spare.proc.pid)
            return
        raise last  # type: ignore[misc]

    def replace(self, reason: str) -> None:
        """The device context is suspect (hang, crash, sticky fault): the next case gets a fresh worker."""
        self.replacements += 1
        if self.current is not None:
            trace.log.debug("%s pid %d: replacing the worker: %s", self.name, self.current.proc.pid, reason)
        self.stop(force=True)

    def stop(self, force: bool = False) -> None:
        current, self.current = self.current, None
        if current is not None:
            current.stop(force=force)

    def close(self) -> None:
        self.stop()
        spare, self.spare = self.spare, None
        if spare is not None:
            spare.stop(force=True)
        if self._own_goldens:
            self.goldens.close()

    # -- one case ----------------------------------------------------------------
    def run(self, case: Case, log_path: Path, repeat: int = 0, baseline: Path | None = None) -> Result:
        """Run ``case`` once; ``baseline``: compare its buffers bit for bit with that file (see determinism)."""
        base = case_fields(case, repeat, self.device, log_path)
        try:
            self.ensure(case.env)
        except WorkerStartError as exc:
            return Result(outcome=Outcome.HARNESS_ERROR, summary=str(exc), duration_s=0.0, **base)
        if self.absent:
            return Result(outcome=Outcome.SKIPPED, summary=f"device not present: {self.absent}", **base)
        if log_path.parent not in self._log_dirs:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_dirs.add(log_path.parent)
        golden = self.goldens.request(case)
        if golden is None:              # no golden process: the worker computes them, and the run says so
            warning = self.goldens.take_warning()
            if warning:
                self.warnings.append(warning)
                trace.log.debug("%s", warning)
        elif golden.failure is not None:
            return self._result(protocol.CaseReply(case.case_id, 0.0, failure=golden.failure), base, log_path)
        started = time.perf_counter()          # the case's time, not the worker's start-up
        current = self.current
        request = protocol.RunRequest(case, str(log_path), repeat, str(baseline) if baseline else None,
                                      nonce=secrets.token_hex(8), golden=golden and golden.golden,
                                      intermediates=self.options.intermediates)
        try:
            current.send(request)
            if not current.wait(case.timeout_s):
                if current.proc.poll() is not None:
                    return self._died(base, log_path, started)
                return self._hung(case, base, log_path, started)
            reply = current.receive(protocol.CaseReply)
        except (EOFError, OSError):
            return self._died(base, log_path, started)
        except protocol.ProtocolError as exc:
            return self._corrupted(str(exc), base, log_path, started)
        if (reply.case_id, reply.nonce) != (case.case_id, request.nonce):
            return self._corrupted(f"a reply for case {reply.case_id!r} with another launch's nonce"
                                   if reply.case_id == case.case_id else
                                   f"a reply for case {reply.case_id!r}", base, log_path, started)
        cap_log(log_path, self.options.max_log_bytes)
        self._watch_rss(current.proc.pid)
        return self._result(reply, base, log_path)

    def _watch_rss(self, pid: int) -> None:
        """Warn once per worker process whose resident memory grew past ``rss_growth_warn_bytes``
        since its first case: a kernel that leaks case after case, before it becomes an OOM."""
        rss = _rss_bytes(pid)
        if rss is None:
            return
        if self._rss is None or self._rss[0] != pid:
            self._rss = (pid, rss, 0, False)
            return
        _, first, cases, warned = self._rss
        cases += 1
        grew = rss - first > self.options.rss_growth_warn_bytes
        if grew and not warned:
            self.warnings.append(f"worker {self.name} ({self.device}, pid {pid}) grew by {(rss - first) / 2**20:.0f} "
                                 f"MiB of resident memory over {cases} cases (from {first / 2**20:.0f} MiB to "
                                 f"{rss / 2**20:.0f} MiB): a kernel may be leaking memory")
            trace.log.debug("%s", self.warnings[-1])
        self._rss = (pid, first, cases, warned or grew)

    def _result(self, reply: protocol.CaseReply, base: dict, log_path: Path) -> Result:
        failure = reply.failure
        if reply.replace_worker:
            self.replace(reply.replace_worker)
        if failure is None:
            return Result(outcome=reply.outcome, summary=reply.summary, report=reply.report,
                          metrics=reply.metrics, duration_s=reply.duration_s, sticky=bool(reply.replace_worker),
                          **base)
        if failure.stage.harness_side:
            cls = Classification(Outcome.HARNESS_ERROR, None,
                                 f"harness failed in {failure.stage.value}: {failure.exc_type}: "
                                 f"{failure.first_line}", False)
        else:
            cls = classify_exception(failure.stage.value, failure.exc_type, failure.message,
                                     failure.traceback, read_log(log_path), rules=self.options.rules)
        if cls.sticky and not reply.replace_worker:
            self.replace(f"sticky {cls.outcome.value}: {cls.summary}")
        return Result(outcome=cls.outcome, code=cls.code, summary=cls.summary,
                      report=failure.traceback, duration_s=reply.duration_s,
                      sticky=cls.sticky or bool(reply.replace_worker),
                      metrics={**_fault_metrics(cls), **reply.metrics}, **base)

    def _corrupted(self, detail: str, base: dict, log_path: Path, started: float) -> Result:
        """Bytes in the pipe that are not this launch's reply (a kernel wrote into an inherited fd)."""
        self.replace(f"worker protocol corrupted: {detail}")
        cls = Classification(Outcome.CRASH, None, f"worker protocol corrupted: {detail}", True, "protocol")
        return Result(outcome=cls.outcome, code=cls.code, summary=cls.summary, sticky=True,
                      report=read_log(log_path)[-4000:], duration_s=time.perf_counter() - started,
                      metrics=_fault_metrics(cls), **base)

    def _hung(self, case: Case, base: dict, log_path: Path, started: float) -> Result:
        proc = self.proc
        trace.log.debug("%s: case %s gave no reply within timeout_s=%g", self.name, case.case_id, case.timeout_s)
        if proc is not None and proc.poll() is None:
            try:
                trace.log.debug("%s pid %d: SIGUSR1 (stack dump into the case log)", self.name, proc.pid)
                os.kill(proc.pid, signal.SIGUSR1)      # Python stacks into the case log
                _wait_for_quiet_log(log_path, _STACK_DUMP_GRACE_S)
            except OSError:
                pass
        self.replace(f"no reply within timeout_s={case.timeout_s:g}")
        cap_log(log_path, self.options.max_log_bytes)
        log_text = read_log(log_path)
        cls = classify_timeout(case.timeout_s, log_text, rules=self.options.rules)
        return Result(outcome=cls.outcome, code=cls.code, summary=cls.summary, sticky=True,
                      report=log_text[-4000:], duration_s=time.perf_counter() - started,
                      metrics=_fault_metrics(cls), **base)

    def _died(self, base: dict, log_path: Path, started: float) -> Result:
        proc = self.proc
        returncode = None
        if proc is not None:
            try:
                returncode = proc.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        self.replace(f"died mid-case (exit status {returncode})")
        cap_log(log_path, self.options.max_log_bytes)
        log_text = read_log(log_path)
        cls = classify_exit(returncode, log_text, rules=self.options.rules)
        return Result(outcome=cls.outcome, code=cls.code, summary=cls.summary, sticky=True,
                      report=log_text[-4000:], duration_s=time.perf_counter() - started,
                      metrics=_fault_metrics(cls), **base)


def _rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` (Linux ``/proc``; None elsewhere or once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _wait_for_quiet_log(log_path: Path, limit_s: float) -> None:
    """Until the stack dump has landed: the log grew and then stopped growing (bounded)."""
    deadline = time.monotonic() + limit_s
    last = -1
    start = log_path.stat().st_size if log_path.exists() else 0
    while time.monotonic() < deadline:
        time.sleep(0.02)
        size = log_path.stat().st_size if log_path.exists() else 0
        if size > start and size == last:
            return
        last = size


def _fault_metrics(cls: Classification) -> dict:
    """What the classifier extracted, kept with the result (rendered by reports)."""
    metrics: dict = {"rule": cls.rule}
    if cls.secondary:
        metrics["secondary"] = list(cls.secondary)
    if cls.fields:
        metrics["fields"] = dict(cls.fields)
    if cls.hint:
        metrics["hint"] = cls.hint
    if cls.name:
        metrics["fault_name"] = cls.name
    if cls.cause:
        metrics["cause"] = cls.cause
    return metrics
