"""``rope_kv_write`` kernels that stop or kill the harness's helper processes (issue 37, item 5):
the zygote a forked worker came from, the worker itself, or a one-off SIGKILL such as the OOM killer
sends.  ``HOSTILE_ONCE`` names a file: a kernel that acts once creates it and acts only while it is
absent."""
from __future__ import annotations

import os
import signal

from harness.kernels.reference import rope_kv_write as _reference


def stops_its_parent(**args):
    """Stops the process it was forked from (the zygote), then answers right."""
    out = _reference(**args)
    os.kill(os.getppid(), signal.SIGSTOP)
    return out


def stops_itself(**args):
    os.kill(os.getpid(), signal.SIGSTOP)
    return _reference(**args)


def killed_once(**args):
    """Killed by SIGKILL on its first call only, with nothing printed (what the OOM killer does)."""
    marker = os.environ["HOSTILE_ONCE"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return _reference(**args)


def killed_always(**args):
    os.kill(os.getpid(), signal.SIGKILL)
    return _reference(**args)
