"""Counter-based draws: every element a pure function of (seed, stream name, element index).

No generator state, so any slice of a tensor can be drawn alone (segments, devices,
thread counts) and gives the same bytes.  Only exactly specified operations touch the
data: int64 add, xor, shift, and, multiplies whose products stay below 2**63 (32-bit
values times 31-bit constants), lookups and copies.  So the CPU, CUDA and NPU produce
identical bytes; the one transcendental (the normal quantiles) runs once, on the host,
in float64, into a 65536-entry table.

Two levels, so that a large tensor costs about one copy of its bytes:

- a stream's **base**: ``BASE + WINDOW`` elements; base element ``b`` is the table
  entry picked by 16 bits of a lowbias32-style hash of word ``b // 2`` (the low half
  for even ``b``, the high half for odd), keyed by the stream;
- element ``f`` of the stream is base element ``offset(f // WINDOW) + f % WINDOW``:
  windows of ``WINDOW`` consecutive elements, each starting at an offset in
  ``[0, BASE)`` hashed from the window's number with a second key.

A large draw hashes the base once (about a million elements; the last few bases are kept
for the next case with the same seed) and then copies one window per ``WINDOW`` elements
(``index_select`` over the base's unfolded windows); a small draw hashes the base
positions of its own elements only.  Both compute the same function.  Within a window
the values are consecutive independent draws; two windows share values only where their
offsets lie within ``WINDOW`` of each other, shifted.
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from functools import lru_cache

import torch

from harness.worker.prefault import empty

VERSION = 2                     # part of every input spec: a change to the draws is a new golden key
BASE = 1 << 20                  # window offsets range over the first BASE base elements
WINDOW = 1 << 12                # elements per window; 8 KiB of bf16 copied per window
_BASE_LEN = BASE + WINDOW       # a window starting at BASE - 1 still ends inside the base
_MAX_WINDOWS = 1 << 31          # window numbers stay below 2**31, so the hash input fits 32 bits
_MASK32 = 0xFFFF_FFFF
_M1, _M2 = 0x7FEB352D, 0x046CA68B   # lowbias32's; < 2**31, so a 32-bit value times one fits in int64


@lru_cache(maxsize=4096)
def stream_keys(seed: int, name: str) -> tuple[int, int, int, int]:
    """(base add, base xor, window add, window xor): 31-, 32-, 31- and 32-bit keys of the stream."""
    raw = hashlib.blake2b(f"{seed}\x00{name}".encode(), digest_size=16).digest()
    words = [int.from_bytes(raw[i:i + 4], "little") for i in range(0, 16, 4)]
    return words[0] >> 1, words[1], words[2] >> 1, words[3]


def _mix(x: torch.Tensor, add: int, xor: int) -> torch.Tensor:
    """lowbias32 with a key added before the first round and xored before the second, in
    place on ``x`` (int64 values below 2**31); returns 32-bit values."""
    x.add_(add).mul_(_M1).bitwise_and_(_MASK32)
    x.bitwise_xor_(torch.bitwise_right_shift(x, 15))
    x.bitwise_xor_(xor)
    x.mul_(_M2).bitwise_and_(_MASK32)
    x.bitwise_xor_(torch.bitwise_right_shift(x, 16))
    return x


# -- tables: the 16-bit draw u mapped to a value ----------------------------------------------

@lru_cache(maxsize=None)
def _host_table(kind: str) -> torch.Tensor:
    u = torch.arange(1 << 16, dtype=torch.float64)
    if kind == "normal":          # the quantile of the middle of each of 65536 equal-probability cells
        return torch.special.ndtri((u + 0.5) / (1 << 16))
    if kind == "uniform":         # [0, 1) in steps of 2**-16
        return u / (1 << 16)
    raise ValueError(f"unknown table {kind!r}")


_device_tables: dict[tuple[str, torch.dtype, torch.device, float, float], torch.Tensor] = {}


def table(kind: str, dtype: torch.dtype, device: torch.device, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    """The value table of ``kind`` times ``scale`` plus ``shift``, in ``dtype`` on ``device``:
    computed in float64 and rounded once, on the host, so a scaled draw costs no pass of its own."""
    key = (kind, dtype, torch.device(device), scale, shift)
    if key not in _device_tables:
        _device_tables[key] = (_host_table(kind) * scale + shift).to(dtype).to(device)
    return _device_tables[key]


# -- the two levels ------------------------------------------------------------------------------

def _base_draws(positions: torch.Tensor, keys: tuple[int, int, int, int]) -> torch.Tensor:
    """The 16-bit draws (table indices) of these base positions."""
    h = _mix(torch.bitwise_right_shift(positions, 1), keys[0], keys[1])
    return torch.where(positions.bitwise_and(1).bool(), torch.bitwise_right_shift(h, 16), h.bitwise_and_(0xFFFF))


_BASE_CHUNK = 1 << 16            # words hashed at a time on the host: the int64 temporaries stay in cache


def _base(keys: tuple[int, int, int, int], values: torch.Tensor) -> torch.Tensor:
    """Every base element of the stream, as values: hashed a word at a time, both halves used."""
    half = _BASE_LEN // 2
    out = torch.empty(half, 2, dtype=values.dtype, device=values.device)
    chunk = _BASE_CHUNK if values.device.type == "cpu" else half     # one launch each on an accelerator
    for first in range(0, half, chunk):
        last = min(half, first + chunk)
        words = _mix(torch.arange(first, last, dtype=torch.int64, device=values.device), keys[0], keys[1])
        # Two lookups of half the length, interleaved by one stack of the small values: half the
        # time of stacking the int64 draws and indexing once (the same values).
        low = torch.index_select(values, 0, words.bitwise_and(0xFFFF))
        high = torch.index_select(values, 0, words.bitwise_right_shift_(16))
        torch.stack([low, high], dim=1, out=out[first:last])
    return out.view(-1)


# The last few bases built, by stream and table: the cases of a matrix that share a seed draw
# the same streams (a case's caches, then the next case's), and a base costs ~10 ms to hash.
# Four hold about 17 MB at most (float32).
_KEPT_BASES = 4
_kept: OrderedDict[tuple, torch.Tensor] = OrderedDict()


def _kept_base(keys: tuple[int, int, int, int], values: torch.Tensor, table_key: tuple) -> torch.Tensor:
    key = (keys, table_key)
    if key in _kept:
        _kept.move_to_end(key)
    else:
        _kept[key] = _base(keys, values)
        while len(_kept) > _KEPT_BASES:
            _kept.popitem(last=False)
    return _kept[key]


def _offsets(first: int, last: int, keys: tuple[int, int, int, int], device: torch.device) -> torch.Tensor:
    """Base offsets of windows ``first .. last - 1``."""
    if last > _MAX_WINDOWS:
        raise ValueError(f"a stream of more than {_MAX_WINDOWS * WINDOW} elements cannot be drawn")
    return _mix(torch.arange(first, last, dtype=torch.int64, device=device), keys[2], keys[3]).bitwise_and_(BASE - 1)


def _positions(start: int, count: int, keys: tuple[int, int, int, int], device: torch.device) -> torch.Tensor:
    """Base positions of stream elements ``start .. start + count - 1``."""
    f = torch.arange(start, start + count, dtype=torch.int64, device=device)
    windows = torch.bitwise_right_shift(f, WINDOW.bit_length() - 1)
    first = start // WINDOW
    return _offsets(first, (start + count - 1) // WINDOW + 1, keys, device)[windows - first] + f.bitwise_and(WINDOW - 1)


class Stream:
    """Stream (seed, name) of ``kind`` values, times ``scale`` plus ``shift`` and rounded once to
    ``dtype``, written a piece at a time: ``write(out, start)`` puts elements ``start ..`` into
    ``out``.  ``elements``: how many the pieces hold in all; from ``_BASE_LEN`` on the base is
    hashed once and windows are copied from it, below that each element is hashed."""

    def __init__(self, seed: int, name: str, kind: str, dtype: torch.dtype, device: torch.device | str,
                 elements: int, *, scale: float = 1.0, shift: float = 0.0) -> None:
        self.device = torch.device(device)
        self.keys = stream_keys(seed, name)
        self.values = table(kind, dtype, self.device, scale, shift)
        self.base = (_kept_base(self.keys, self.values, (kind, dtype, self.device, scale, shift))
                     if elements >= _BASE_LEN else None)
        self._offset_blocks: dict[int, torch.Tensor] = {}

    def write(self, out: torch.Tensor, start: int) -> None:
        if out.dtype != self.values.dtype:       # a silent cast would round the draws a second time
            raise TypeError(f"stream of {self.values.dtype} written into {out.dtype}")
        flat = out.view(-1)
        if self.base is None:
            flat.copy_(self.values[_base_draws(_positions(start, flat.numel(), self.keys, self.device), self.keys)])
            return
        end = start + flat.numel()
        lo, hi = min(-(-start // WINDOW) * WINDOW, end), max(end // WINDOW * WINDOW, start)
        if lo >= hi:                  # inside one window
            flat.copy_(self.base[_positions(start, end - start, self.keys, self.device)])
            return
        if lo > start:                # the partial windows at either end: element by element
            flat[:lo - start] = self.base[_positions(start, lo - start, self.keys, self.device)]
        windows = self.base.unfold(0, WINDOW, 1)                  # a view: row o is base[o : o + WINDOW]
        torch.index_select(windows, 0, self._offsets(lo // WINDOW, hi // WINDOW),
                           out=flat[lo - start:hi - start].view(-1, WINDOW))
        if hi < end:
            flat[hi - start:] = self.base[_positions(hi, end - hi, self.keys, self.device)]

    def _offsets(self, first: int, last: int) -> torch.Tensor:
        """Base offsets of windows ``first .. last - 1``: hashed ``_OFFSET_BLOCK`` windows at a time
        and kept, so a stream written in many small pieces hashes each window once."""
        block = first // _OFFSET_BLOCK
        if (last - 1) // _OFFSET_BLOCK != block or last > _MAX_WINDOWS:   # across blocks: hashed as asked
            return _offsets(first, last, self.keys, self.device)
        if block not in self._offset_blocks:
            at = block * _OFFSET_BLOCK
            self._offset_blocks[block] = _offsets(at, min(at + _OFFSET_BLOCK, _MAX_WINDOWS), self.keys, self.device)
        return self._offset_blocks[block][first - block * _OFFSET_BLOCK:last - block * _OFFSET_BLOCK]


_OFFSET_BLOCK = 1 << 12           # windows (16 Mi elements) whose offsets a Stream hashes at once


def fill(out: torch.Tensor, seed: int, name: str, kind: str,
         segments: list[tuple[int, int]] | None = None, *, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    """Write element ``f`` of stream (seed, name) into ``out.view(-1)[f]`` for every ``f`` in
    the ``(start, count)`` segments (default: all of ``out``).  ``kind``: ``normal`` (N(0, 1)
    quantiles, |x| < 4.4) or ``uniform`` ([0, 1) in steps of 2**-16); times ``scale`` plus
    ``shift``, rounded once to out's dtype.  Runs where ``out`` lives."""
    flat = out.view(-1)
    wanted = [(start, count) for start, count in (segments if segments is not None else [(0, flat.numel())])
              if count > 0]
    stream = Stream(seed, name, kind, out.dtype, out.device, sum(count for _, count in wanted), scale=scale, shift=shift)
    for start, count in wanted:
        stream.write(flat[start:start + count], start)
    return out


def draw(seed: int, name: str, shape: tuple[int, ...] | torch.Size, kind: str, dtype: torch.dtype,
         device: torch.device | str = "cpu", *, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    """A new tensor holding elements ``0 ..`` of stream (seed, name) (see ``fill``); a large host
    tensor's pages are mapped before the draws are written (``prefault``)."""
    return fill(empty(shape, dtype, device), seed, name, kind, scale=scale, shift=shift)
