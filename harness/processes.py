"""Ending a child process: SIGTERM, a grace period, then SIGKILL (native code may ignore SIGTERM);
and whatever is left of its process group."""
from __future__ import annotations

import os
import signal
import subprocess

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
