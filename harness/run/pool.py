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
asked before the case is sent; the worker only reads the file it names.  How a process is
forked or spawned, and the handle on a started one, are ``harness.run.spawn``'s (shared
with the golden process).
"""
from __future__ import annotations

import dataclasses
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

from harness import devicelogs, trace
from harness.case import Case
from harness.classify.matching import Classification, classify_exception, classify_exit, classify_timeout, read_log
from harness.devices import VISIBLE_ENV, Device, pinning_env
from harness.errors import HarnessError
from harness.logs import cap_log
from harness.outcomes import Outcome, Result
from harness.processes import TERM_GRACE_S, enter, kill_group, marker_env, own, starting, sweep
from harness.run.golden_process import GoldenProcess
from harness.run.spawn import (STARTUP_ATTEMPTS, ForkedProc, WorkerOptions, WorkerProcess, WorkerStartError,
                               expand_kernel_paths, fork_from_zygote, open_pidfd, source_root, spawner, zygote_unfit)
from harness.worker import protocol

_STACK_DUMP_GRACE_S = 0.5


# warm: cases share a worker, and hygiene (harness.worker.hygiene) finds and undoes what a kernel leaves;
# case: every case gets a worker no kernel ran in (forked from the pristine zygote, or spawned), so what a
# kernel does to its process cannot reach the next case whether or not hygiene sees it.
ISOLATION_MODES = ("warm", "case")


def worker_env(options: WorkerOptions, case_env: dict[str, str], device: Device | None = None) -> dict[str, str]:
    """A worker's environment: the run's, the kernel paths first on PYTHONPATH, ``device`` alone
    visible (``devices.pinning_env``, unless the case names the visible devices itself), then the
    case's own variables."""
    env = dict(options.base_env)
    paths = [*expand_kernel_paths(options.kernel_paths, options.worktree),
             *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    if source_root():
        paths.append(source_root())
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    if device is not None and not (set(case_env) & set(VISIBLE_ENV.values())):
        env.update(pinning_env(device, env))
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


class DeviceLost(HarnessError):
    """The device stayed unhealthy in two fresh workers: its cases go to the other devices."""


# Launches made synchronous for the re-run of a device fault: the fault lands on the call that made it.
BLOCKING_ENV = {"npu": "ASCEND_LAUNCH_BLOCKING", "cuda": "CUDA_LAUNCH_BLOCKING"}
RERUN_OUTCOMES = (Outcome.DEVICE_FAULT, Outcome.ORCH_ERROR)


class DeviceWorker:
    """The front end's handle on one device's worker process.

    After the first replacement (a hang, a crash, a sticky fault) a spare worker
    is kept starting in the background, so the next replacement costs nothing:
    a fault-prone matrix does not pay a torch import per fault.
    """

    def __init__(self, device: Device, options: WorkerOptions, name: str = "w0", goldens=None):
        """``goldens``: the run's ``GoldenProcess`` (the engine's, shared by its devices); None: one of its own."""
        trace.enable(trace.enabled_by_env())       # HARNESS_DEBUG=1 traces the CLI and the pytest plugin alike
        self.device = device
        self.options = options
        self.name = name
        self._own_goldens = goldens is None
        self.goldens = goldens or GoldenProcess(options, fork=options.fork_cpu_workers and device.kind == "cpu")
        self.current: WorkerProcess | None = None
        self.spare: WorkerProcess | None = None
        self.absent: str | None = None
        self.unhealthy: str | None = None     # the current worker's tiny op failed on the device
        self.lost: str | None = None          # unhealthy in two fresh workers: no more cases here
        self._present = False                 # a worker has found the device (so absent later means lost)
        self._own_device_logs: set[str] = set()   # this worker's device log directories, pruned at close
        self.info: dict = {}
        self._mark: devicelogs.Mark | None = None      # the device logs when the current case began
        self._device_log: tuple[bool, devicelogs.DeviceLog | None] = (False, None)   # (read, what)
        self.starts = 0           # processes started, spares included
        self.replacements = 0     # workers stopped because of a fault
        self._log_dirs: set[Path] = set()
        self.warnings: list[str] = []     # for the report: a worker that kept growing (a leaking kernel)
        self._rss: tuple[int, int, int, bool] | None = None  # pid, RSS after its first case, cases since, warned
        self._last_case: str | None = None    # the case the current worker answered last (a deferred change's blame)
        self._deferred: tuple[str, str] | None = None   # (blamed case, changes) of the reply just received
        # (helper, why) when the attempt just made ended in a way the harness cannot pin on the kernel:
        # a stopped worker or zygote (helper True), a death with no sign from the kernel's code
        self._unattributed: tuple[bool, str] | None = None

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
        env = self._env(case_env)
        parent_sock, child_sock = socket.socketpair()
        try:
            with open(log_path, "ab") as log_file, starting():
                proc = spawner().submit(
                    subprocess.Popen,
                    [sys.executable, "-m", "harness.worker.serve", "--fd", str(child_sock.fileno()),
                     "--device", str(self.device), "--golden-dtype", self.options.golden_dtype,
                     "--front-end-pid", str(os.getpid())],
                    pass_fds=(child_sock.fileno(),), env=env,
                    stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                    start_new_session=True,      # Ctrl-C reaches the front end only; killed as a group
                ).result()
                own(proc.pid)
                enter(proc.pid, self.name)       # its cgroup and session: the second marker (item 4)
        finally:
            child_sock.close()
        key = _env_key(case_env)
        trace.log.debug("%s: spawned pid %d for %s (env %s, log %s)", self.name, proc.pid, self.device,
                        _env_text(key), log_path)
        pidfd = open_pidfd(proc.pid)
        return WorkerProcess(proc, Connection(parent_sock.detach()), key, log_path, self.name, pidfd, pidfd is not None,
                             *self._device_log_dir(env, case_env))

    def _env(self, case_env: dict[str, str]) -> dict[str, str]:
        env = {**worker_env(self.options, case_env, self.device), **marker_env(self.name)}  # the run's marker: item 4
        if self.device.kind == "npu" or self.options.device_logs:
            env.update(devicelogs.log_env(self.options.log_dir, f"{self.name}.{self.starts}", str(self.device), env))
        return env

    def _device_log_dir(self, env: dict[str, str], case_env: dict[str, str]) -> tuple[str | None, bool]:
        """Where this worker's device logs are read, and whether the directory is the harness's own."""
        if not (self.device.kind == "npu" or self.options.device_logs):
            return None, True
        path = env.get(devicelogs.LOG_PATH_ENV)
        user = self.options.base_env.get(devicelogs.LOG_PATH_ENV) or case_env.get(devicelogs.LOG_PATH_ENV)
        if path and not user:
            self._own_device_logs.add(str(Path(path).parent))
        return path, not user

    def _fork(self, case_env: dict[str, str], log_path: Path) -> WorkerProcess:
        from harness.worker.serve import forked_main
        env = self._env(case_env)
        process, parent_conn = fork_from_zygote(
            self.options.log_dir, forked_main, f"harness-worker-{self.name}",
            (str(self.device), self.options.golden_dtype, env, str(log_path), os.getpid()))
        enter(process.pid, self.name)            # before its first case: its cgroup and session (item 4)
        key = _env_key(case_env)
        trace.log.debug("%s: forked pid %d for %s from the zygote (env %s, log %s)", self.name, process.pid,
                        self.device, _env_text(key), log_path)
        forked = ForkedProc(process)
        return WorkerProcess(forked, parent_conn, key, log_path, self.name, forked.sentinel, False,
                             *self._device_log_dir(env, case_env))

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
        self.absent, self.info, self.unhealthy = ready.absent, ready.info, ready.unhealthy

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
            elif spare is not None and spare.proc.poll() is not None:
                # its Ready is still in the pipe, but it died waiting (with a zygote killed since it was forked)
                trace.log.debug("%s: spare pid %d has ended; not used", self.name, spare.proc.pid)
                spare.stop(force=True)
                spare = None
            try:
                process = spare or self._spawn(case_env)
                self._await_ready(process)
            except WorkerStartError as exc:
                last = exc
                continue
            self.current = process
            # under --isolation case every case needs one: it starts while this case runs
            if self.replacements or self.options.isolation == "case":
                self.spare = self._spawn(case_env)
                trace.log.debug("%s: pid %d is the spare", self.name, self.spare.proc.pid)
            return
        raise last  # type: ignore[misc]

    def replace(self, reason: str) -> None:
        """The device context is suspect (hang, crash, sticky fault): the next case gets a fresh worker."""
        self.replacements += 1
        self._last_case = None
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
        for directory in self._own_device_logs:      # the run's device logs are kept, but not without bound
            devicelogs.prune(directory)
        if self._own_goldens:
            self.goldens.close()

    # -- one case ----------------------------------------------------------------
    def run(self, case: Case, log_path: Path, repeat: int = 0, baseline: Path | None = None) -> Result:
        """Run ``case`` once; ``baseline``: compare its buffers bit for bit with that file (see determinism).

        A device fault on an accelerator is re-run once, launch-blocking, in a fresh worker
        (``blocking_rerun``); the result is the first attempt's, with the re-run on it.  Raises
        ``DeviceLost`` when the device stays unhealthy in two fresh workers (the case did not run).
        """
        result = self._attributed(case, log_path, repeat, baseline)
        var = BLOCKING_ENV.get(self.device.kind)
        if (var and self.options.blocking_rerun and result.outcome in RERUN_OUTCOMES
                and case.env.get(var) != "1"):
            blocking = dataclasses.replace(case, env={**case.env, var: "1"})
            trace.log.debug("%s: %s on %s: re-running launch-blocking (%s=1)", self.name, result.label,
                            case.case_id, var)
            try:
                again = self._run(blocking, log_path.with_name(log_path.name.removesuffix(".log") + ".blocking.log"),
                                  repeat, None)
            except DeviceLost as exc:
                again = Result(outcome=Outcome.SKIPPED, summary=f"device lost: {exc}",
                               **case_fields(case, repeat, self.device, None))
            result = dataclasses.replace(result, metrics={**result.metrics,
                                                          "blocking_rerun": blocking_rerun(result, again, var)})
        return result

    def _attributed(self, case: Case, log_path: Path, repeat: int, baseline: Path | None) -> Result:
        """A case whose worker was stopped, or died with no sign from the kernel's code (an empty log
        and SIGKILL, the status the forkserver reports when it lost the real one, a zygote gone), runs
        once more in a fresh worker before any verdict: one sighting is never the kernel's CRASH.  A
        helper stopped or killed again is ``HARNESS_ERROR`` naming both; another death the same way
        keeps the re-run's outcome (it repeats: the kernel's)."""
        result = self._run(case, log_path, repeat, baseline)
        first, self._unattributed = self._unattributed, None
        if first is None:
            return result
        warning = (f"case {case.case_id} (worker {self.name}, {self.device}): {first[1]}; "
                   f"re-run once in a fresh worker")
        self.warnings.append(warning)
        trace.log.debug("%s", warning)
        again = self._run(case, log_path, repeat, baseline)
        second, self._unattributed = self._unattributed, None
        note = {"first_attempt": {"outcome": result.outcome.value, "summary": result.summary, "why": first[1]}}
        if second is not None and (first[0] or second[0]):
            return Result(outcome=Outcome.HARNESS_ERROR, duration_s=again.duration_s,
                          summary=f"{first[1]}; again on the re-run: {second[1]}",
                          metrics={"rerun": note}, **case_fields(case, repeat, self.device, log_path))
        if second is not None:
            note["second_attempt"] = second[1]
        return dataclasses.replace(again, metrics={**again.metrics, "rerun": note})

    def _run(self, case: Case, log_path: Path, repeat: int, baseline: Path | None) -> Result:
        """A worker whose state changed between cases (the reply's ``deferred``: a timer, a finalizer,
        a callback an earlier kernel left) is replaced and the case runs again in a fresh one; the
        change is blamed on the case that ran last in the old worker (a warning, and the
        re-run result's ``metrics.hygiene.deferred``)."""
        result = self._run_once(case, log_path, repeat, baseline)
        deferred = self._deferred
        if deferred is None:
            return result
        self._deferred = None
        rerun = self._run_once(case, log_path, repeat, baseline)
        if self._deferred is not None:        # a fresh worker drifted before its first case: not a kernel's doing
            changes, self._deferred = self._deferred[1], None
            return Result(outcome=Outcome.HARNESS_ERROR, duration_s=rerun.duration_s,
                          summary=f"a fresh worker's state changed before the case ran: {changes}",
                          **case_fields(case, repeat, self.device, log_path))
        hygiene = {**rerun.metrics.get("hygiene", {}), "deferred": {"after_case": deferred[0], "changes": deferred[1]}}
        return dataclasses.replace(rerun, metrics={**rerun.metrics, "hygiene": hygiene})

    def _run_once(self, case: Case, log_path: Path, repeat: int, baseline: Path | None) -> Result:
        base = case_fields(case, repeat, self.device, log_path)
        if self.lost:
            raise DeviceLost(self.lost)
        try:
            self.ensure(case.env)
            if self.absent and self._present:          # it was there: a device gone mid-run is unhealthy
                self.unhealthy, self.absent = f"no longer present: {self.absent}", None
            if self.unhealthy and not self.absent:      # after a fault: one more fresh worker, then lost
                trace.log.debug("%s: %s unhealthy (%s); one more fresh worker", self.name, self.device, self.unhealthy)
                self.replace(f"unhealthy device: {self.unhealthy}")
                self.ensure(case.env)
                if self.absent:
                    self.unhealthy, self.absent = f"no longer present: {self.absent}", None
                if self.unhealthy:
                    self.lost = self.unhealthy
                    self.warnings.append(f"{self.device} lost: {self.unhealthy} (its remaining cases went to "
                                         f"the other devices)")
                    raise DeviceLost(self.unhealthy)
        except WorkerStartError as exc:
            return Result(outcome=Outcome.HARNESS_ERROR, summary=str(exc), duration_s=0.0, **base)
        if self.absent:
            return Result(outcome=Outcome.SKIPPED, summary=f"device not present: {self.absent}", **base)
        self._present = True
        try:
            result = self._launch(case, log_path, repeat, baseline, base)
            if result.outcome.failed:
                found = self._device_log_found()
                if found is not None:
                    result = dataclasses.replace(result, metrics={**result.metrics, "device_log": found.to_metrics()})
        finally:
            if self.options.isolation == "case":      # no case runs in a process a kernel ran in
                self.stop(force=True)
        return self._strays(result)

    def _strays(self, result: Result) -> Result:
        """Processes with this worker's marker that left every worker's tree (the kernel turned the
        subreaper off and double-forked, or cloned with CLONE_PARENT): killed now and blamed on the
        case that just ended (its ``CONTRACT`` when it passed).  Another worker's are left to that
        worker's case (a clean case that ends while another worker's kernel escapes is not blamed).
        A worker's own descendants are its hygiene's business."""
        killed = sweep(worker=self.name)
        if not killed:
            return result
        text = (f"{len(killed)} process(es) with this run's marker outside every worker's process tree "
                f"(killed): {', '.join(killed)}")
        self.warnings.append(f"case {result.case_id} (worker {self.name}, {self.device}): {text}")
        trace.log.debug("%s", self.warnings[-1])
        if self.current is not None:       # its subreaper may be off now: the next case gets a fresh worker
            self.replace(f"processes left its tree: {', '.join(killed)}")
        metrics = {**result.metrics, "escaped": killed}
        if result.outcome is Outcome.PASS:
            return dataclasses.replace(result, outcome=Outcome.CONTRACT,
                                       summary=f"the kernel's processes left the worker's process tree: {text}",
                                       metrics=metrics)
        return dataclasses.replace(result, metrics=metrics, warnings=(*result.warnings, text))

    def _launch(self, case: Case, log_path: Path, repeat: int, baseline: Path | None, base: dict) -> Result:
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
        # the device logs as the case begins: a listing, no read (read only if the case fails)
        self._mark = devicelogs.mark(current.device_logs, current.own_device_logs, {current.proc.pid})
        self._device_log = (False, None)
        request = protocol.RunRequest(case, str(log_path), repeat, str(baseline) if baseline else None,
                                      nonce=secrets.token_hex(8), golden=golden and golden.golden,
                                      intermediates=self.options.intermediates)
        try:
            current.send(request)
            if not current.wait(case.timeout_s):
                if current.halted:
                    return self._halted(base, log_path, started)
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
        if reply.deferred:
            return self._drifted(case, reply, base)
        self._watch_rss(current.proc.pid)
        self._last_case = case.case_id
        return self._result(reply, base, log_path)

    def _device_log_found(self) -> devicelogs.DeviceLog | None:
        """What the device runtime wrote to its log files during the current case (read once)."""
        read, found = self._device_log
        if not read:
            pids = {self.current.proc.pid} if self.current is not None else set()
            try:
                found = devicelogs.since(self._mark, pids)
            except Exception as exc:  # an unreadable log tree never costs the case its verdict
                trace.log.debug("%s: device logs not read: %s", self.name, exc)
                found = None
            self._device_log = (True, found)
        return found

    def _device_log_text(self) -> str:
        found = self._device_log_found()
        return "\n" + found.text if found is not None else ""

    def _drifted(self, case: Case, reply: protocol.CaseReply, base: dict) -> Result:
        """The worker changed between cases: replace it; ``run`` runs the case again."""
        last = reply.deferred_to or self._last_case or "(none: the worker's first case)"
        warning = (f"deferred change after case {last} (worker {self.name}, {self.device}): {reply.deferred}; "
                   f"the worker was replaced and case {case.case_id} ran again in a fresh one")
        self.warnings.append(warning)
        trace.log.debug("%s", warning)
        self._deferred = (last, reply.deferred)
        self.replace(f"deferred change after case {last}: {reply.deferred}")
        return Result(outcome=Outcome.HARNESS_ERROR, summary=warning, duration_s=reply.duration_s, **base)

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
                          warnings=tuple(reply.warnings), hint=reply.hint, **base)
        if failure.stage is protocol.Stage.SPEC:      # the spec module's code, not the kernel's nor ours
            cls = Classification(Outcome.GOLDEN_ERROR, None, failure.first_line, False)
        elif failure.stage.harness_side:
            cls = Classification(Outcome.HARNESS_ERROR, None,
                                 f"harness failed in {failure.stage.value}: {failure.exc_type}: "
                                 f"{failure.first_line}", False)
        else:
            cls = classify_exception(failure.stage.value, failure.exc_type, failure.message,
                                     failure.traceback, read_log(log_path) + self._device_log_text(),
                                     rules=self.options.rules)
        if cls.sticky and not reply.replace_worker:
            self.replace(f"sticky {cls.outcome.value}: {cls.summary}")
        return Result(outcome=cls.outcome, code=cls.code, summary=cls.summary,
                      report=failure.traceback, duration_s=reply.duration_s,
                      sticky=cls.sticky or bool(reply.replace_worker),
                      metrics={**_fault_metrics(cls), **reply.metrics}, warnings=tuple(reply.warnings), **base)

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
        cls = classify_timeout(case.timeout_s, log_text + self._device_log_text(), rules=self.options.rules)
        return Result(outcome=cls.outcome, code=cls.code, summary=cls.summary, sticky=True,
                      report=log_text[-4000:], duration_s=time.perf_counter() - started,
                      metrics=_fault_metrics(cls), **base)

    def _halted(self, base: dict, log_path: Path, started: float) -> Result:
        """The worker was stopped by a signal mid-case (T state): it will never answer."""
        pid = self.proc.pid if self.proc is not None else None
        if pid is not None:
            kill_group(pid)          # its own process group (session): SIGTERM waits on a stopped process
        self.replace(f"stopped mid-case (pid {pid})")
        self._unattributed = (True, f"the worker (pid {pid}) was stopped (SIGSTOP) mid-case")
        return Result(outcome=Outcome.HARNESS_ERROR, summary=self._unattributed[1], sticky=True,
                      duration_s=time.perf_counter() - started, **base)

    def _unattributable(self, returncode: int | None, log_text: str) -> str | None:
        """Why a worker's death cannot be pinned on the kernel; None when it can."""
        forked = isinstance(self.proc, ForkedProc)
        zygote_gone = zygote_unfit() if forked else None
        if zygote_gone:
            return f"the worker died with the zygote: {zygote_gone}"
        if returncode is None:
            return "the worker died and its exit status is unknown"
        if forked and getattr(self.proc, "lost_status", False):
            return "the worker died and the zygote could not report its exit status"
        if forked and returncode == 255 and not log_text.strip():
            return "the worker died with status 255 (what the forkserver reports when it lost the real one) and an empty log"
        if returncode == -signal.SIGKILL and not log_text.strip():
            return ("the worker was killed by SIGKILL with an empty log (from outside the kernel: the OOM "
                    "killer, or someone killing harness processes)")
        return None

    def _died(self, base: dict, log_path: Path, started: float) -> Result:
        proc = self.proc
        returncode = None
        if proc is not None:
            try:
                returncode = proc.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        cap_log(log_path, self.options.max_log_bytes)
        log_text = read_log(log_path)
        why = self._unattributable(returncode, log_text)
        if why:
            self._unattributed = (why.startswith("the worker died with the zygote"), why)
        self.replace(f"died mid-case (exit status {returncode})")
        cls = classify_exit(returncode, log_text + self._device_log_text(), rules=self.options.rules)
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
    return cls.metrics()


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')
_RUNTIME_FRAME = re.compile(r"/(?:harness|torch|torch_npu)/")


def blocking_rerun(first: Result, again: Result, var: str) -> dict:
    """What the launch-blocking re-run of a device fault showed: whether the fault came back when
    every launch was synchronous, and where (the innermost frames of its stack outside the harness)."""
    frames = [m.groups() for m in map(_FRAME.match, (again.report or "").splitlines()) if m]
    # the kernel's frames: not the harness's, nor the runtime's own Python (torch, torch_npu)
    own = [f for f in frames if not _RUNTIME_FRAME.search(f[0].replace("\\", "/"))]
    where = [f"{path}:{line} in {func}" for path, line, func in (own or frames)[-3:]]
    return {"env": f"{var}=1", "outcome": again.outcome.value, "label": again.label, "summary": again.summary,
            "reproduced": again.outcome in RERUN_OUTCOMES, "same_label": again.label == first.label,
            "where": where, "log": again.log,
            **({"device_log": again.metrics["device_log"]} if "device_log" in again.metrics else {})}
