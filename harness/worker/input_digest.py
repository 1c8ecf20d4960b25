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
CHUNK_GROUPS = 16      # groups summed together: a 64 MB int64 temporary at most


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
    words = _words(t)
    pad = -words.numel() % PERIOD
    if pad:
        words = torch.cat([words, words.new_zeros(pad)])
    rows = words.view(-1, PERIOD)
    if rows.shape[0] <= GROUP_ROWS:                # one group, of weight 1: both sums are the same
        sums = rows.to(torch.int64).sum(0)
        return sums, sums
    # Groups summed a chunk at a time, vectorised across the chunk's groups (one Python step per
    # CHUNK_GROUPS groups, not per group): the same sums, in a third of the time (docs/benchmarks.md).
    plain = torch.zeros(PERIOD, dtype=torch.int64, device=words.device)
    weighted = torch.zeros_like(plain)
    full = rows.shape[0] // GROUP_ROWS
    for g0 in range(0, full, CHUNK_GROUPS):
        k = min(CHUNK_GROUPS, full - g0)
        sums = rows[g0 * GROUP_ROWS:(g0 + k) * GROUP_ROWS].view(k, GROUP_ROWS, PERIOD).sum(1, dtype=torch.int64)
        weights = 1 + torch.arange(g0, g0 + k, device=words.device) % _WEIGHTS
        plain += sums.sum(0)
        weighted += (sums * weights[:, None]).sum(0)
    if rows.shape[0] % GROUP_ROWS:                  # the last, partial group
        sums = rows[full * GROUP_ROWS:].sum(0, dtype=torch.int64)
        plain += sums
        weighted += sums * (1 + full % _WEIGHTS)
    return plain, weighted


def _words(t: torch.Tensor) -> torch.Tensor:
    raw = t.detach().contiguous().view(-1).view(torch.uint8)
    if raw.numel() % 4:
        raw = torch.cat([raw, raw.new_zeros(4 - raw.numel() % 4)])
    return raw.view(torch.int32)

