"""A short digest of a case's inputs, computed where they live (runs in the device worker).

Two runs, two thread counts or two devices that generated the same bytes give the same
digest.  Per tensor (in contract order: the op's arguments as ``harness.ops`` lists them,
caches in their pre-launch state) the bytes are read as int32 words laid out in rows of
``PERIOD`` (a prime; a short last row zero-padded), and the rows are taken in groups of
``GROUP_ROWS``.  Two int64 vectors of ``PERIOD`` sums come back to the host: the column
sums, and the column sums weighted by ``1 + group % 1021``.  Integer sums are exact in
any order and stay below 2**63 for tensors up to tens of GB, so the reduction may be
split over threads or run on any device.  blake2b then folds them with each tensor's
name, dtype and shape.  It fingerprints identical bytes; it is not a cryptographic hash
(equal and opposite changes in one column of one group cancel).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from harness.ops import OpSpec

PERIOD = 4093
GROUP_ROWS = 64
_WEIGHTS = 1021
# Groups widened to int64 and summed together, per device type: 4 MiB at a time on the CPU
# (it stays in cache), 32 MiB elsewhere (fewer launches).
CHUNK_GROUPS = {"cpu": 2, "other": 16}
FOLD_GROUPS = 256      # group sums kept (8 MiB) before they are added to the two totals


@dataclass(frozen=True)
class InputsDigest:
    nbytes: int          # every tensor argument's bytes
    digest: str          # 8 hex digits


def digest_inputs(op: OpSpec, args: Mapping[str, Any]) -> InputsDigest:
    h = hashlib.blake2b(digest_size=4)
    nbytes = 0
    for arg in op.args:
        value = args.get(arg.name)
        if not isinstance(value, torch.Tensor):
            h.update(f"{arg.name}={value!r};".encode())
            continue
        nbytes += value.numel() * value.element_size()
        h.update(f"{arg.name}:{value.dtype}:{tuple(value.shape)};".encode())
        fold(h, value)
    return InputsDigest(nbytes, h.hexdigest())


def fold(h: "hashlib._Hash", t: torch.Tensor) -> None:
    """Fold ``t``'s bytes into ``h``: its two column-sum vectors, summed on its device, read back
    as little-endian int64s (as struct's "<q" packs them)."""
    for sums in column_sums(t):
        h.update(sums.cpu().numpy().astype("<i8", copy=False).tobytes())


def column_sums(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(plain, group-weighted) int64 column sums of t's bytes as int32 words in rows of PERIOD."""
    rows, last = _rows(t)
    device = rows.device
    plain = torch.zeros(PERIOD, dtype=torch.int64, device=device)
    weighted = torch.zeros_like(plain)
    full = rows.shape[0] // GROUP_ROWS
    # The int32 words are widened a chunk of groups at a time into one int64 buffer reused
    # throughout (on the CPU small enough to stay in cache): widening the whole tensor, or a
    # fresh temporary per chunk, cost more in page faults than the sums (docs/benchmarks.md).
    chunk = CHUNK_GROUPS.get(device.type, CHUNK_GROUPS["other"])
    if full:
        wide = torch.empty(min(chunk, full) * GROUP_ROWS, PERIOD, dtype=torch.int64, device=device)
        group_sums = torch.empty(min(FOLD_GROUPS, full), PERIOD, dtype=torch.int64, device=device)
    kept = 0                                       # group sums waiting in group_sums
    for g0 in range(0, full, chunk):
        k = min(chunk, full - g0)
        block = wide[:k * GROUP_ROWS]
        block.copy_(rows[g0 * GROUP_ROWS:(g0 + k) * GROUP_ROWS])
        torch.sum(block.view(k, GROUP_ROWS, PERIOD), 1, out=group_sums[kept:kept + k])
        kept += k
        if kept + chunk > len(group_sums) or g0 + k == full:
            _add_groups(plain, weighted, group_sums[:kept], g0 + k - kept)
            kept = 0
    rest = rows[full * GROUP_ROWS:].sum(0, dtype=torch.int64)   # the last, partial group (< GROUP_ROWS rows)
    if last is not None:
        rest += last
    plain += rest
    weighted += rest * (1 + full % _WEIGHTS)
    return plain, weighted


def _add_groups(plain: torch.Tensor, weighted: torch.Tensor, sums: torch.Tensor, first: int) -> None:
    """Add groups ``first ..``'s column sums (one row each) to both totals."""
    weights = 1 + torch.arange(first, first + len(sums), device=sums.device) % _WEIGHTS
    plain += sums.sum(0)
    weighted += (sums * weights[:, None]).sum(0)


def _rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """t's bytes as int32 words: the whole rows of PERIOD (a view, no copy), and the last, short
    row zero-padded to PERIOD and widened to int64 (None when there is none)."""
    raw = t.detach().contiguous().view(-1).view(torch.uint8)
    if raw.storage_offset() % 4:                   # a word view needs an aligned start
        raw = raw.clone()
    whole = raw.numel() // (4 * PERIOD) * PERIOD   # words in whole rows
    rows = raw[:whole * 4].view(torch.int32).view(-1, PERIOD)
    tail = raw[whole * 4:]
    if not tail.numel():
        return rows, None
    padded = tail.new_zeros(PERIOD * 4)
    padded[:tail.numel()] = tail
    return rows, padded.view(torch.int32).to(torch.int64)
