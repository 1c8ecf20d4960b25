"""The device worker process: imports torch once, then runs cases sent over a pipe.

Started by ``harness.run.pool`` as ``python -m harness.worker.serve --fd N --device D``
(or forked from the CPU zygote, ``forked_main``).  It knows nothing of the front end:
messages are ``harness.worker.protocol`` records; a ``RunRequest`` executes one case
with stdout/stderr redirected at the file-descriptor level into the case's log (native
kernels print there too), and is answered with a ``CaseReply``.  Python stacks of every
thread are dumped into the current log on
SIGUSR1 (sent by the front end before it kills a hung case) and on a fatal
signal.

The worker dies with the front end (``lifeline``): a thread waits for the front end's
exit and then kills the worker's whole process group (the kernel's children too), and
the worker's parent-death signal (``PR_SET_PDEATHSIG``, Linux) kills it even when
that thread cannot run.

The worker is a child subreaper (``become_subreaper``, Linux): a process a kernel starts
in a session of its own, or by a double fork, is re-parented to the worker when its parent
ends instead of to init, so it stays below the worker, where the hygiene check finds it
after the case and ``kill_tree`` kills it; when the loop ends, everything below the worker
is killed.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import faulthandler
import os
import select
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection

from harness.processes import kill_tree, reap
from harness.worker import protocol


@contextlib.contextmanager
def redirected_output(log_path: str):
    """Point fds 1 and 2 at the case log for the duration of the case."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


_PR_SET_PDEATHSIG = 1
_PARENT_POLL_S = 0.25


_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make orphaned descendants (``setsid``, double fork, ``start_new_session``) this process's
    children instead of init's, so none escapes it (Linux >= 3.4; False where it is not there)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def end_descendants() -> None:
    """Kill everything below this process (a loop that ends, a lifeline that fires)."""
    reap(kill_tree(os.getpid()), within_s=0.5)


def _die_with_group() -> None:
    end_descendants()          # those in sessions of their own, found through the subreaper
    # the worker leads its own process group (its own session): the kernel's children go with it
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def _watch(front_end_pid: int) -> None:
    try:
        fd = os.pidfd_open(front_end_pid)
    except ProcessLookupError:
        _die_with_group()
    except (AttributeError, OSError):         # no pidfd (not Linux, Linux < 5.3): poll the pid
        fd = None
    if fd is not None:
        select.select([fd], [], [])
    else:
        while True:
            try:
                os.kill(front_end_pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                pass
            time.sleep(_PARENT_POLL_S)
    _die_with_group()


def lifeline(front_end_pid: int) -> None:
    """Die with the front end: its exit (even by SIGKILL) kills this worker and its process group.

    The worker's parent (the front end for a spawned worker, the zygote for a forked one)
    also gets a parent-death signal where Linux has one: it needs no Python thread to run,
    so a kernel stuck in native code holding the GIL still dies with its parent.  The worker
    becomes a subreaper first, so what a kernel starts in a session of its own stays below it.
    """
    become_subreaper()
    if sys.platform.startswith("linux"):
        parent = os.getppid()
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:           # the parent died before the signal was armed
            _die_with_group()
    threading.Thread(target=_watch, args=(front_end_pid,), name="harness-lifeline", daemon=True).start()


def serve(conn: Connection, device_text: str, golden_dtype: str, forked: bool = False) -> int:
    """The message loop: announce readiness, then run cases until ``Stop`` or the pipe closes;
    then nothing a kernel started is left below the worker.  ``forked``: from the zygote, which has
    run nothing but imports."""
    try:
        return _serve(conn, device_text, golden_dtype, forked)
    finally:
        end_descendants()


def _serve(conn: Connection, device_text: str, golden_dtype: str, forked: bool = False) -> int:
    faulthandler.enable(all_threads=True)           # fatal signals: stacks to fd 2 (the case log)
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)

    from harness.goldens.cache import GoldenCache
    from harness.devices import backend as backend_for, host_memory, local_device, parse_device
    from harness.worker.determinism import Baselines
    from harness.worker.execute import KernelLoader, execute_case
    from harness.worker.hooks import install_audit_sentinel
    from harness.worker.hygiene import freeze_baseline, snapshot, warm_up
    from harness.worker import repeats as reuse

    device = local_device(parse_device(device_text))   # a pinned worker's only device (docs/ascend.md)
    backend = backend_for(device)
    try:
        absent = backend.absent_reason(device)
        info = {} if absent else backend.describe(device)
    except Exception as exc:   # a broken torch-npu install is an absent device, with the reason
        absent, info = f"{type(exc).__name__}: {exc}", {}
    unhealthy = None
    if not absent and device.kind != "cpu":
        try:
            backend.activate(device)      # before any kernel import
        except Exception as exc:          # present, but it cannot be made current: a lost device says so here
            unhealthy = f"{type(exc).__name__}: {exc}".splitlines()[0]
        unhealthy = unhealthy or backend.health(device)      # a tiny op
    if not absent and not unhealthy:
        try:
            warm_up(backend.torch_device(device))     # torch's own pools: not a kernel's leftovers
        except Exception:      # a device that fails here fails the first case too, which classifies it
            pass
    install_audit_sentinel()
    freeze_baseline(collect=not forked)    # the full collection after each launch walks only what came since
    pristine = snapshot()      # every case's state is compared with this (hygiene.drift)
    # no root: this process never writes a golden; it reads the golden process's files
    golden_cache = GoldenCache(None)
    loader = KernelLoader()
    baselines = Baselines()
    # on the CPU the device's memory is the host's, and only it is weighed (memory_plan.keep_fits)
    repeats = reuse.Repeats(device.kind, lambda: (backend.memory(device), None if device.kind == "cpu" else host_memory()),
                            on=reuse.enabled())
    protocol.send(conn, protocol.Ready(pid=os.getpid(), absent=absent, info=info, unhealthy=unhealthy))

    while True:
        try:
            request, _ = protocol.receive(conn, protocol.RunRequest, protocol.Stop)
        except EOFError:
            return 0
        if isinstance(request, protocol.Stop):
            return 0
        with redirected_output(request.log):
            reply = execute_case(request.case, device, backend, golden_cache, loader, golden_dtype,
                                 golden=request.golden, repeat=request.repeat, baseline=request.baseline,
                                 baselines=baselines, repeats=repeats, pristine=pristine,
                                 intermediates=request.intermediates)
        protocol.send(conn, dataclasses.replace(reply, nonce=request.nonce))


def release_zygote() -> None:
    # multiprocessing hands every forked child the zygote's "clients alive" pipe; while a
    # worker holds it the zygote outlives the front end, and so the worker (its child)
    # never gets its parent-death signal.  The worker starts no process through the zygote.
    from multiprocessing import forkserver
    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        os.close(fd)
        server._forkserver_alive_fd = None


def become_forked_child(env: dict[str, str], log_path: str, front_end_pid: int) -> None:
    """What a process forked from the CPU zygote takes on before its loop (a device worker or the
    golden process): its own session, the zygote let go, its lifeline, its log as stdout/stderr
    and its environment."""
    os.setsid()
    release_zygote()
    lifeline(front_end_pid)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(env)


# harness/processes.py MARKER_ENV and worker_comm, restated: the worker imports nothing of the front
# end (tests/workers/test_escaped_processes.py holds them equal).
_MARKER_ENV = "HARNESS_RUN_NONCE"
_PR_SET_NAME = 15


def _name_after_marker(marker: str) -> None:
    """A forked worker's process name from its marker (``harness.<worker>``): its environment block
    is the zygote's, so a copy of it that never exec's keeps only this to say whose it is."""
    if not marker:
        return
    name = ("harness." + marker.rpartition(".")[2])[:15].encode()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
    except (OSError, AttributeError):      # no prctl (not Linux): the bare marker still finds it at run end
        pass


def forked_main(conn: Connection, device_text: str, golden_dtype: str,
                env: dict[str, str], log_path: str, front_end_pid: int) -> None:
    """Entry point of a worker forked from the CPU zygote (``spawn.ZYGOTE_PRELOAD`` imported, nothing run).

    Takes on what a spawned worker gets from its command line and environment: its own
    session, its log as stdout/stderr, the run's environment and PYTHONPATH, its lifeline.
    """
    become_forked_child(env, log_path, front_end_pid)
    _name_after_marker(env.get(_MARKER_ENV, ""))
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))    # as a fresh interpreter reads it
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [p for p in paths if p not in sys.path]
    sys.exit(serve(conn, device_text, golden_dtype, forked=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness.worker.serve")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--golden-dtype", default="fp32")
    parser.add_argument("--front-end-pid", type=int, required=True)
    args = parser.parse_args(argv)
    os.set_inheritable(args.fd, False)     # the protocol socket: no program a kernel runs gets it
    lifeline(args.front_end_pid)
    return serve(Connection(args.fd), args.device, args.golden_dtype)


if __name__ == "__main__":
    sys.exit(main())
