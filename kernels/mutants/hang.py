"""Mutant: never returns.

Real bug: a deadlock in cross-core synchronisation; the device stalls
("running-stalled") and the host waits forever (eventually 507018).  Here the
launch sleeps in a loop, so only the front end's timeout ends it (HANG).
"""
from __future__ import annotations

import time
from typing import Any

from harness.kernels.reference import for_every_op


def _never_return(op: str, args: dict[str, Any]) -> None:
    while True:
        time.sleep(1.0)


(rope_kv_write, paged_decode_attention, fused_rope_decode_attention, prefill_attention,
 decode_layers) = for_every_op(_never_return)
