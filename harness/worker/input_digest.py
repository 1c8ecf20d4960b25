"""A short digest of a case's inputs, computed where they live (runs in the device worker).

Two runs, two thread counts or two devices that generated the same bytes give the same
digest.  Per tensor (in contract order: the op's arguments as ``harness.ops`` lists them,
caches in their pre-launch state) the bytes are read as little-endian int64 words laid out
in rows of ``PERIOD`` (a prime; a short last row zero-padded), and the rows are taken in
groups of ``GROUP_ROWS``.  Two vectors of ``PERIOD`` sums come back to the host: the column
sums, and the column sums weighted by ``1 + group % 1021``, both modulo 2**64.  Sums modulo
2**64 are the same in any order, so the reduction may be split over threads or run on any
device, and the words are summed as they lie, in one read of the bytes: no widening pass.
blake2b then folds the sums with each tensor's name, dtype and shape.  It fingerprints
identical bytes; it is not a cryptographic hash (equal and opposite changes in one column of
one group cancel).
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
FOLD_GROUPS = 256      # groups summed at a time: their sums (8 MiB) are added to the totals before the next


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
    """(plain, group-weighted) column sums modulo 2**64 of t's bytes as int64 words in rows of PERIOD."""
    rows, last = _rows(t)
    device = rows.device
    plain = torch.zeros(PERIOD, dtype=torch.int64, device=device)
    weighted = torch.zeros_like(plain)
    full = rows.shape[0] // GROUP_ROWS
    if full:
        group_sums = torch.empty(min(FOLD_GROUPS, full), PERIOD, dtype=torch.int64, device=device)
    # int64 addition and multiplication wrap on every device torch runs on; the sums are those of
    # the integers modulo 2**64 whatever the order (tests/unit/test_input_digest.py checks them
    # against numpy's unsigned arithmetic, which is defined to wrap).
    for g0 in range(0, full, FOLD_GROUPS):
        k = min(FOLD_GROUPS, full - g0)
        sums = group_sums[:k]
        torch.sum(rows[g0 * GROUP_ROWS:(g0 + k) * GROUP_ROWS].view(k, GROUP_ROWS, PERIOD), 1, out=sums)
        weights = 1 + torch.arange(g0, g0 + k, device=device) % _WEIGHTS
        plain += sums.sum(0)
        weighted += (sums * weights[:, None]).sum(0)
    rest = rows[full * GROUP_ROWS:].sum(0)          # the last, partial group (< GROUP_ROWS rows)
    if last is not None:
        rest += last
    plain += rest
    weighted += rest * (1 + full % _WEIGHTS)
    return plain, weighted


def _rows(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """t's bytes as int64 words: the whole rows of PERIOD (a view, no copy), and the last, short
    row zero-padded to PERIOD (None when there is none)."""
    raw = t.detach().contiguous().view(-1).view(torch.uint8)
    if raw.storage_offset() % 8:                   # a word view needs an aligned start
        raw = raw.clone()
    whole = raw.numel() // (8 * PERIOD) * PERIOD   # words in whole rows
    rows = raw[:whole * 8].view(torch.int64).view(-1, PERIOD)
    tail = raw[whole * 8:]
    if not tail.numel():
        return rows, None
    padded = tail.new_zeros(PERIOD * 8)
    padded[:tail.numel()] = tail
    return rows, padded.view(torch.int64)
