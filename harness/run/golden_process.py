"""The front end's side of the golden process: goldens computed where no kernel is imported.

A kernel runs in its device worker's process, and whatever its import does to torch there
(a default dtype of float64, a swapped-in ``torch.rsqrt``) would reach any golden computed
in that process, and through the golden cache every later run.  So goldens are computed
in one process per run that never imports code under test (``harness.worker.golden_serve``),
and it is the only writer of the golden cache.

For each case the device's thread asks it for the case's goldens (``request``) before the
case is sent to the device worker, and for the next case's (``prefetch``) while this one
runs: the golden process would otherwise sit idle while the kernel runs, and the worker
wait for it before each case.  Requests go to the process one at a time, in the order
asked, from one thread of their own.  The answer is a ``GoldenRef`` to a golden cache file,
which goes to the device worker in its ``RunRequest`` and is read there (key and digest
checked).  A file rather than the tensors on the pipe: the cache file exists anyway, the
worker reads it with one mmap'd read, and the protocol stays plain data.  With
``--no-golden-cache`` the process writes into a directory of its own for this run, removed
when the run ends (each distinct golden is still computed once per run).

The process is forked from the CPU zygote (which imported torch and the harness and ran
nothing) when the run's workers are and its goldens are computed on the host, otherwise
spawned fresh: with the device runtimes' autoload off, or, under ``--golden-device``
(``WorkerOptions.golden_device``), with it as the workers have it (torch-npu loads).
Its environment has no ``--kernel-path`` and no case ``env:``.  The device threads share
it under a lock.  If it cannot start, the device workers compute their own goldens
without storing them, and the run says so in its warnings (``take_warning``).
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from multiprocessing.connection import Connection

from harness import trace
from harness.case import Case
from harness.processes import marker_env, own, starting
from harness.run.spawn import (STARTUP_ATTEMPTS, ForkedProc, WorkerOptions, WorkerProcess, WorkerStartError,
                               expand_kernel_paths, fork_from_zygote, open_pidfd, source_root, spawner)
from harness.worker import protocol

SPEC_PATH_VAR = "HARNESS_SPEC_PATH"
GOLDEN_TIMEOUT_S = 600.0      # the least a golden gets (the largest golden, a whole model stack, takes minutes)
_NAME = "golden"


def golden_env(options: WorkerOptions) -> dict[str, str]:
    """The run's environment without the kernels: no ``--kernel-path`` on ``PYTHONPATH``, no case
    ``env:``; the kernel paths in ``HARNESS_SPEC_PATH``, for spec modules only (docs/specs.md)."""
    env = dict(options.base_env)
    paths = [*filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    if source_root():
        paths.append(source_root())
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    # a spec op's golden is user code found on --kernel-path: put on sys.path only when a spec
    # module is imported (harness/worker/spec_module.py), never for a builtin op's golden
    env[SPEC_PATH_VAR] = os.pathsep.join(expand_kernel_paths(options.kernel_paths, options.worktree))
    if options.golden_device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"   # no device runtime in a process that uses none
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(marker_env())      # found at run end like every process the harness starts
    return env


class GoldenProcess:
    """One run's golden process, started on the first request; ``request`` is thread-safe."""

    def __init__(self, options: WorkerOptions, fork: bool):
        self.options = options
        self.fork = fork and options.golden_device == "cpu"    # an accelerator runtime must not be forked
        self.current: WorkerProcess | None = None
        self.starts = 0
        self.unavailable: str | None = None     # why it could not start: workers compute their own goldens
        self._warned = False
        self._closed = False
        self._lock = threading.Lock()
        self._own_dir: str | None = None        # --no-golden-cache: this run's files, removed by close
        # asked, not yet taken: by case id, each with its case (mutants and fresh seeds share an id)
        self._asked: dict[str, list[tuple[Case, Future]]] = {}
        self._asked_lock = threading.Lock()
        self._requests = ThreadPoolExecutor(max_workers=1, thread_name_prefix="golden-requests")

    @property
    def pid(self) -> int | None:
        return self.current.proc.pid if self.current else None

    def cache_dir(self) -> str:
        if self.options.golden_cache:
            return self.options.golden_cache
        if self._own_dir is None:
            self._own_dir = tempfile.mkdtemp(prefix="harness-goldens-")
        return self._own_dir

    # -- lifecycle -------------------------------------------------------------
    def _start(self) -> WorkerProcess:
        self.options.log_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        log_path = self.options.log_dir / f"golden-process-{os.getpid()}-{self.starts}.log"
        env = golden_env(self.options)
        if self.fork:
            from harness.worker.golden_serve import forked_main
            process, parent_conn = fork_from_zygote(self.options.log_dir, forked_main, "harness-golden",
                                                    (self.cache_dir(), env, str(log_path), os.getpid()))
            forked = ForkedProc(process)
            started = WorkerProcess(forked, parent_conn, (), log_path, _NAME, forked.sentinel)
            how = "forked from the zygote"
        else:
            parent_sock, child_sock = socket.socketpair()
            try:
                with open(log_path, "ab") as log_file, starting():
                    proc = spawner().submit(
                        subprocess.Popen,
                        [sys.executable, "-m", "harness.worker.golden_serve", "--fd", str(child_sock.fileno()),
                         "--golden-cache", self.cache_dir(), "--front-end-pid", str(os.getpid()),
                         "--golden-device", self.options.golden_device],
                        pass_fds=(child_sock.fileno(),), env=env, stdin=subprocess.DEVNULL, stdout=log_file,
                        stderr=subprocess.STDOUT, start_new_session=True,
                    ).result()
                    own(proc.pid)
            finally:
                child_sock.close()
            pidfd = open_pidfd(proc.pid)
            started = WorkerProcess(proc, Connection(parent_sock.detach()), (), log_path, _NAME, pidfd, pidfd is not None)
            how = "spawned"
        trace.log.debug("golden process: %s pid %d (cache %s, log %s)", how, started.proc.pid, self.cache_dir(),
                        log_path)
        if not started.conn.poll(self.options.startup_timeout_s):
            started.stop(force=True)
            raise WorkerStartError(f"the golden process did not start within {self.options.startup_timeout_s:g}s "
                                   f"(log: {log_path})")
        try:
            started.receive(protocol.Ready)
        except (EOFError, OSError, protocol.ProtocolError):
            started.stop(force=True)
            raise WorkerStartError(f"the golden process died while starting (log: {log_path})") from None
        return started

    def _ensure(self) -> WorkerProcess | None:
        if self.current is not None and self.current.proc.poll() is None:
            return self.current
        self._stop()
        last = ""
        for _ in range(STARTUP_ATTEMPTS):
            try:
                self.current = self._start()
                return self.current
            except (WorkerStartError, OSError) as exc:
                last = str(exc)
        self.unavailable = last
        trace.log.debug("golden process: unavailable: %s", last)
        return None

    def _stop(self) -> None:
        current, self.current = self.current, None
        if current is not None:
            current.stop(force=False)

    def close(self) -> None:
        """Stop the process; a request in flight (Ctrl-C mid-golden) is not waited for: its process is killed."""
        self._closed = True
        self._requests.shutdown(wait=False, cancel_futures=True)
        with self._asked_lock:
            self._asked.clear()
        if self._lock.acquire(timeout=1.0):
            try:
                self._stop()
            finally:
                self._lock.release()
        elif self.current is not None:
            self.current.stop(force=True)
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None

    # -- one case ----------------------------------------------------------------
    def prefetch(self, case: Case) -> None:
        """Start on ``case``'s goldens now, after those already asked for; ``request`` takes them."""
        self._ask(case)

    def request(self, case: Case) -> protocol.GoldenReply | None:
        """The goldens of ``case`` (a ``GoldenRef``, or the failure computing them); None when the
        golden process cannot start, and the device worker computes them itself."""
        future = self._ask(case, take=True)
        try:
            return future.result()
        except CancelledError:
            return _failed(case, "the run ended before the golden was made", "")

    def _ask(self, case: Case, take: bool = False) -> Future:
        """The future of ``case``'s reply, asked now unless it already was; ``take``: and forget it
        (the next ask of an equal case asks again: a hit then)."""
        with self._asked_lock:
            same_id = self._asked.setdefault(case.case_id, [])
            for i, (asked, future) in enumerate(same_id):
                if asked == case:          # equal, not just the same id: a flake hunt's fresh seeds share one
                    if take:
                        del same_id[i]
                    break
            else:
                if self._closed:
                    future = Future()
                    future.cancel()
                    return future
                future = self._requests.submit(self._request_now, case)
                if not take:
                    same_id.append((case, future))
            if not same_id:
                del self._asked[case.case_id]
            return future

    def _request_now(self, case: Case) -> protocol.GoldenReply | None:
        with self._lock:
            if self.unavailable is not None:
                return None
            why = ""
            for _ in range(2):            # a golden process that died is replaced once per request
                if self._closed:
                    return _failed(case, "the run ended before the golden was made", "")
                current = self._ensure()
                if current is None:
                    return None
                request = protocol.GoldenRequest(case, self.options.golden_dtype, nonce=secrets.token_hex(8))
                timeout_s = max(case.timeout_s, GOLDEN_TIMEOUT_S)
                try:
                    current.send(request)
                    if current.wait(timeout_s):
                        reply = current.receive(protocol.GoldenReply)
                        if (reply.case_id, reply.nonce) == (case.case_id, request.nonce):
                            return reply
                        why = f"a golden reply for another request ({reply.case_id!r})"
                    elif current.halted:
                        why = "the golden process was stopped (SIGSTOP)"
                    elif current.proc.poll() is None:
                        why = f"no golden within {timeout_s:g}s"
                        trace.log.debug("golden process pid %d: replacing it: %s", current.proc.pid, why)
                        self.current = None
                        current.stop(force=True)
                        break                 # a golden that hangs would hang again: not retried
                    else:
                        why = f"the golden process died (exit status {current.proc.poll()})"
                except (EOFError, OSError, protocol.ProtocolError) as exc:
                    why = f"the golden process failed: {type(exc).__name__}: {exc}"
                trace.log.debug("golden process pid %d: replacing it: %s", current.proc.pid, why)
                self.current = None
                current.stop(force=True)
            return _failed(case, why, f"{why} (log: {current.log_path})")

    def take_warning(self) -> str | None:
        """Once per run, when the golden process could not start: the line for the run's warnings."""
        with self._lock:
            if self.unavailable is None or self._warned:
                return None
            self._warned = True
            return (f"the golden process could not start ({self.unavailable}): goldens were computed in the "
                    f"device workers, where the kernels run, and not stored; a kernel that changes torch "
                    f"when imported can change them")


def _failed(case: Case, why: str, detail: str) -> protocol.GoldenReply:
    failure = protocol.Failure(protocol.Stage.GOLDEN, "GoldenProcessError", why, detail)
    return protocol.GoldenReply(case.case_id, "", failure=failure)
