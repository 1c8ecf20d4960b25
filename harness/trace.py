"""--debug / HARNESS_DEBUG=1: trace the worker protocol, spawns, replacements and kill escalations on stderr."""
from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("harness.trace")


def enable(on: bool = True) -> None:
    """Send trace lines to stderr (idempotent)."""
    if not on:
        return
    if not any(getattr(h, "_harness_trace", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[harness %(process)d %(relativeCreated)8.0fms] %(message)s"))
        handler._harness_trace = True
        log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False


def enabled_by_env(env=os.environ) -> bool:
    return env.get("HARNESS_DEBUG", "") not in ("", "0")
