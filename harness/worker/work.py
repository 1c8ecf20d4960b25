"""The least a case's op must move and compute, from its inputs (runs in the device worker; docs/latency.md).

Bytes: every read-only input read once (a spec op's: every input its specs declare), the
outputs written once and the cache rows at valid slots written once per layer (``OpEntry.layered``:
the ``L`` size), plus what the op's pack adds (``Pack.work``: the cache rows an attention reads,
say) with the flops it counts.  Lower bounds by construction: achieved GB/s over these is what
the kernel must at least have moved.  A spec op (docs/specs.md), or a pack that declares no
``work``, moves its inputs' bytes read and its outputs' bytes written; its flops are not counted
(None).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness import packs
from harness.worker.case_inputs import CaseInputs


@dataclass(frozen=True)
class Work:
    bytes: int
    flops: int | None           # None: an op whose arithmetic we do not count (a copy, a cache write)


def _nbytes(t) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def work(ci: CaseInputs) -> Work:
    entry = packs.find(ci.op.name)          # None: a spec op
    layers = int(ci.sizes.get("L", 1)) if entry is not None and entry.layered else 1
    caches = [ci.args[a.name] for a in ci.op.caches]
    # one token's cache row across its heads; a spec op has no cache: its inputs and outputs are all it moves
    row_bytes = caches[0].shape[-2] * caches[0].shape[-1] * caches[0].element_size() if caches else 0
    read = sum(_nbytes(ci.args[a.name]) for a in ci.op.by_role("input"))
    written_rows = int((ci.slots >= 0).sum()) if ci.op.writes_cache else 0
    written = sum(_nbytes(torch.empty(shape, dtype=dtype, device="meta")) for shape, dtype in ci.outputs.values())
    written += len(caches) * written_rows * row_bytes * layers
    flops = None
    hook = packs.pack_of(ci.op.name).work if entry is not None else None
    if hook:
        extra, flops = packs.resolve(hook)(ci, row_bytes, layers)
        read += extra
    return Work(int(read + written), flops)
