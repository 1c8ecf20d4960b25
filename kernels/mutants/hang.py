"""Mutant: never returns.

Real bug: a deadlock in cross-core synchronisation; the device stalls
("running-stalled") and the host waits forever (eventually 507018).  Here the
launch sleeps in a loop, so only the front end's timeout ends it (HANG).
"""
from __future__ import annotations

import time
from typing import Any

from kernels.reference import with_op_signature


def _never_return(op: str, args: dict[str, Any]) -> None:
    while True:
        time.sleep(1.0)


rope_kv_write = with_op_signature("rope_kv_write", _never_return)
paged_decode_attention = with_op_signature("paged_decode_attention", _never_return)
fused_rope_decode_attention = with_op_signature("fused_rope_decode_attention", _never_return)
prefill_attention = with_op_signature("prefill_attention", _never_return)
decode_layers = with_op_signature("decode_layers", _never_return)
