"""Ending a child process: SIGTERM, a grace period, then SIGKILL (native code may ignore SIGTERM)."""
from __future__ import annotations

import os
import signal
import subprocess

TERM_GRACE_S = 3.0


def terminate(proc, *, group: bool = False, grace_s: float = TERM_GRACE_S) -> None:
    """Stop ``proc`` (a ``Popen``, or anything with its ``poll/wait/terminate/kill``; its whole process group with ``group``, for a child started in a session
    of its own) and reap it.  Already gone is fine."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
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
