"""``rope_kv_write`` kernels that misbehave after computing the right answer (see the package doc)."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import torch

from harness.kernels.reference import rope_kv_write as _reference

MARKER = "HARNESS_HOSTILE_MARKER"


def sets_env_and_cwd(**args):
    os.environ[MARKER] = "set by a kernel"
    os.chdir("/")
    return _reference(**args)


def needs_clean_env(**args):
    """Fails (ValueError) when an earlier kernel's environment or cwd reached this case."""
    if MARKER in os.environ or os.getcwd() == "/":
        raise ValueError(f"state from another case: {MARKER}={os.environ.get(MARKER)!r}, cwd {os.getcwd()}")
    return _reference(**args)


def float64_default(**args):
    out = _reference(**args)
    torch.set_default_dtype(torch.float64)
    return out


def patches_rsqrt(**args):
    out = _reference(**args)
    original = torch.rsqrt
    torch.rsqrt = lambda x, *a, **kw: original(x, *a, **kw) * 1.001
    return out


def late_device_fault(**args):
    """A thread that prints an NPU fault line 0.2 s after the launch returned."""
    def later():
        time.sleep(0.2)
        print("[ERROR] RUNTIME: aclrtSynchronizeStream failed, error code is 507015", flush=True)

    out = _reference(**args)
    threading.Thread(target=later, name="late-fault-printer", daemon=True).start()
    return out


def raises_value_error(**args):
    raise ValueError("an ordinary kernel error")


def spawns_sleeper(**args):
    out = _reference(**args)
    subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return out


def fork_then_segfault(**args):
    """The child sleeps holding every fd (the pipe to the front end included); the parent segfaults."""
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    os.kill(os.getpid(), signal.SIGSEGV)


def writes_garbage(**args):
    out = _reference(**args)
    # every descriptor it holds, whatever number the worker's pipe got (/proc lists them)
    for fd in sorted(int(name) for name in os.listdir("/proc/self/fd")):
        if fd == 0:
            continue
        try:
            os.write(fd, b"\xff\xfegarbage from a kernel\n" * 4)
        except OSError:
            continue
    return out


def holds_the_gil_forever(**args):
    """Blocks in native code without releasing the GIL (``PyDLL`` keeps it): no Python thread of
    the worker runs again, so only a signal the kernel needs no thread for can end the worker."""
    import ctypes
    ctypes.PyDLL(None).pause()


def forges_a_passing_reply(**args):
    """Writes a well-formed ``CaseReply`` (PASS, for case id ``forged``) into every socket it holds,
    then raises: without the launch's nonce the forgery must not become the verdict."""
    import socket
    import stat
    from multiprocessing.connection import Connection
    from harness.outcomes import Outcome
    from harness.worker import protocol
    forged = protocol.CaseReply("forged", 0.0, outcome=Outcome.PASS, summary="forged")
    for fd in range(3, 64):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode) and socket.socket(fileno=os.dup(fd)).getpeername() is not None:
                protocol.send(Connection(os.dup(fd)), forged)
        except OSError:
            continue
    raise ValueError("the kernel failed after forging its reply")
