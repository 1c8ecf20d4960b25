"""Mutant: allocates workspace until memory runs out.

Real bug: a workspace sized from an unguarded length (a seq_len of garbage, a
-1 slot turned into a huge size) that allocates until the allocator fails.
To stay safe on a shared machine the mutant first lowers its own address-space
limit (RLIMIT_AS) to what the process uses now plus ``OOM_MUTANT_HEADROOM_MB``
(default 512 MB), allocates 64 MB blocks until the allocator refuses, and
restores the limit on the way out.  The allocator's own error propagates: on
the CPU, torch's "DefaultCPUAllocator: can't allocate memory".
"""
from __future__ import annotations

import os
import resource
from typing import Any

import torch

from harness.kernels.reference import for_every_op

_BLOCK = 64 << 20


def _address_space_in_use() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _allocate_until_refused(op: str, args: dict[str, Any]) -> None:
    headroom = int(os.environ.get("OOM_MUTANT_HEADROOM_MB", "512")) << 20
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_address_space_in_use() + headroom, hard))
    blocks = []
    try:
        while True:
            blocks.append(torch.ones(_BLOCK, dtype=torch.uint8))
    finally:
        blocks.clear()
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


(rope_kv_write, paged_decode_attention, fused_rope_decode_attention, prefill_attention,
 decode_layers) = for_every_op(_allocate_until_refused)
