"""Mutant: hangs inside native code that ignores SIGTERM.

Real bug: a launch blocked in a vendor runtime call (a stream synchronize on a
deadlocked device) that neither returns nor reacts to a polite signal.  The
kernel ignores SIGTERM, then blocks in libc's ``pause()`` through ctypes, so
the Python interpreter never regains control: only faulthandler's C-level stack
dump and SIGKILL reach it.
"""
from __future__ import annotations

import ctypes
import signal
from typing import Any

from harness.kernels.reference import for_every_op


def _block_in_native_code(op: str, args: dict[str, Any]) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    libc = ctypes.CDLL(None)
    while True:
        libc.pause()


(rope_kv_write, paged_decode_attention, fused_rope_decode_attention, prefill_attention,
 decode_layers) = for_every_op(_block_in_native_code)
