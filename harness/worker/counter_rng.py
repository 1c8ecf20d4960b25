"""Counter-based draws: every element a pure function of (seed, stream name, element index).

No generator state, so any slice of a tensor can be drawn alone (chunks, threads, devices)
and gives the same bytes.  Only exactly specified operations touch the data: int64 add,
xor, shift, and, and multiplies whose products stay below 2**63 (32-bit values times
31-bit constants), then a lookup into a 65536-entry table built on the host.  So the CPU,
CUDA and NPU produce identical bytes; the one transcendental (the normal quantiles) runs
once, on the host, in float64.

Layout: a stream is cut into blocks of ``2 * BLOCK_WORDS`` elements, each with two
round keys derived on the host (blake2b of seed, stream name, block).  A block is
cut into tiles of ``2 * TILE_WORDS`` elements: tile ``s`` hashes its words
``s*TILE_WORDS ..`` (word index within the block) once, and the low 16 bits of each hash
are the tile's first half of elements, the high 16 bits its second half.  The hash is a
lowbias32-style xorshift-multiply with a key added before the first round and xored
before the second, so no stream is a shifted or xored copy of another.
"""
from __future__ import annotations

import hashlib
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import torch

VERSION = 1                     # part of every input spec: a change to the draws is a new golden key
BLOCK_WORDS = 1 << 20           # words per round-key block
TILE_WORDS = 1 << 15            # words per tile; 256 KiB of int64, which stays in a core's L2
_BLOCK_ELEMS, _TILE_ELEMS = 2 * BLOCK_WORDS, 2 * TILE_WORDS
_MASK32 = 0xFFFF_FFFF
_M1, _M2 = 0x7FEB352D, 0x046CA68B   # lowbias32's; < 2**31, so a 32-bit value times one fits in int64
_DEVICE_TILES = BLOCK_WORDS // TILE_WORDS   # on an accelerator one launch per block: 1 Mi words


def stream_key(seed: int, name: str) -> bytes:
    return hashlib.blake2b(f"{seed}\x00{name}".encode(), digest_size=16).digest()


@lru_cache(maxsize=4096)
def _round_keys(key: bytes, block: int) -> tuple[int, int]:
    """A 31-bit key added before the first round, a 32-bit one xored before the second."""
    raw = hashlib.blake2b(key + block.to_bytes(8, "little"), digest_size=8).digest()
    return int.from_bytes(raw[:4], "little") >> 1, int.from_bytes(raw[4:], "little")


# -- tables: the 16-bit draw u mapped to a value ----------------------------------------------

@lru_cache(maxsize=None)
def _host_table(kind: str) -> torch.Tensor:
    u = torch.arange(1 << 16, dtype=torch.float64)
    if kind == "normal":          # the quantile of the middle of each of 65536 equal-probability cells
        return torch.special.ndtri((u + 0.5) / (1 << 16)).float()
    if kind == "uniform":         # [0, 1) in steps of 2**-16, exact in float32
        return (u / (1 << 16)).float()
    raise ValueError(f"unknown table {kind!r}")


_device_tables: dict[tuple[str, torch.dtype, torch.device], torch.Tensor] = {}


def table(kind: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The value table of ``kind`` in ``dtype`` on ``device`` (rounded once, on the host)."""
    key = (kind, dtype, device)
    if key not in _device_tables:
        _device_tables[key] = _host_table(kind).to(dtype).to(device)
    return _device_tables[key]


# -- words ---------------------------------------------------------------------------------------

class _Workspace:
    """The temporaries of one run of ``tiles`` tiles, reused across runs by one thread."""

    def __init__(self, tiles: int, device: torch.device):
        self.tiles = tiles
        self.base = torch.arange(tiles * TILE_WORDS, dtype=torch.int64, device=device)
        self.x = torch.empty_like(self.base)
        self.tmp = torch.empty_like(self.base)
        self.index = torch.empty(2 * tiles * TILE_WORDS, dtype=torch.int64, device=device)


_workspaces = threading.local()


def _workspace(tiles: int, device: torch.device) -> _Workspace:
    cache = _workspaces.__dict__.setdefault("by_device", {})
    ws = cache.get((tiles, device))
    if ws is None:
        ws = cache[(tiles, device)] = _Workspace(tiles, device)
    return ws


def _hash_tiles(ws: _Workspace, tile: int, keys: tuple[int, int]) -> torch.Tensor:
    """The table indices of ``ws.tiles`` tiles from ``tile`` of a block: per tile, the low 16
    bits of its word hashes, then the high 16 bits."""
    x, tmp = ws.x, ws.tmp
    torch.add(ws.base, tile * TILE_WORDS + keys[0], out=x)      # < 2**20 + 2**31: no mask needed
    x.mul_(_M1).bitwise_and_(_MASK32)
    x.bitwise_xor_(torch.bitwise_right_shift(x, 15, out=tmp))
    x.bitwise_xor_(keys[1])
    x.mul_(_M2).bitwise_and_(_MASK32)
    x.bitwise_xor_(torch.bitwise_right_shift(x, 16, out=tmp))
    halves = ws.index.view(ws.tiles, 2, TILE_WORDS)
    torch.bitwise_and(x.view(ws.tiles, TILE_WORDS), 0xFFFF, out=halves[:, 0])
    torch.bitwise_right_shift(x.view(ws.tiles, TILE_WORDS), 16, out=halves[:, 1])
    return ws.index


def _hash_elements(offsets: torch.Tensor, tile: int, keys: tuple[int, int]) -> torch.Tensor:
    """The table indices ``_hash_tiles`` gives at these element offsets of a run from ``tile``
    (the same words, the same mix), computed for those elements alone."""
    in_tile = offsets % _TILE_ELEMS
    x = (offsets // _TILE_ELEMS) * TILE_WORDS + in_tile % TILE_WORDS + (tile * TILE_WORDS + keys[0])
    x = (x * _M1).bitwise_and_(_MASK32)
    x.bitwise_xor_(torch.bitwise_right_shift(x, 15))
    x.bitwise_xor_(keys[1])
    x = (x * _M2).bitwise_and_(_MASK32)
    x.bitwise_xor_(torch.bitwise_right_shift(x, 16))
    return torch.where(in_tile < TILE_WORDS, x.bitwise_and(0xFFFF), torch.bitwise_right_shift(x, 16))


def _runs(first: int, n: int, tiles_per_run: int):
    """(block, tile, tiles): runs of whole tiles, within one block, covering elements first .. first+n."""
    tile_start = first // _TILE_ELEMS
    tile_end = -(-(first + n) // _TILE_ELEMS)
    tiles_per_block = BLOCK_WORDS // TILE_WORDS
    t = tile_start
    while t < tile_end:
        block, tile = divmod(t, tiles_per_block)
        count = min(tiles_per_run, tiles_per_block - tile, tile_end - t)
        yield block, tile, count
        t += count


_TILES_PER_THREAD = 8


def _fill_run(out: torch.Tensor, key: bytes, first: int, values: torch.Tensor, run: tuple[int, int, int],
              tiles_per_run: int) -> None:
    block, tile, tiles = run
    keys = _round_keys(key, block)
    start = block * _BLOCK_ELEMS + tile * _TILE_ELEMS        # stream index of the run's first element
    end = start + tiles * _TILE_ELEMS
    lo, hi = max(start, first), min(end, first + out.numel())
    if (hi - lo) * 4 < end - start:   # a small tensor: hash only its elements, not whole tiles
        offsets = torch.arange(lo - start, hi - start, dtype=torch.int64, device=out.device)
        out[lo - first:hi - first] = values[_hash_elements(offsets, tile, keys)]
        return
    index = _hash_tiles(_workspace(tiles_per_run, out.device), tile, keys)
    if (lo, hi) == (start, end):
        torch.index_select(values, 0, index[:end - start], out=out[lo - first:hi - first])
    else:                         # tiles the request only partly covers
        out[lo - first:hi - first] = values[index[lo - start:hi - start]]


def fill(out: torch.Tensor, seed: int, name: str, kind: str,
         segments: list[tuple[int, int]] | None = None) -> torch.Tensor:
    """Write element ``f`` of stream (seed, name) into ``out.view(-1)[f]`` for every ``f`` in
    the ``(start, count)`` segments (default: all of ``out``).  ``kind``: ``normal`` (N(0, 1)
    quantiles, |x| < 4.4) or ``uniform`` ([0, 1) in steps of 2**-16), rounded to out's dtype."""
    flat = out.view(-1)
    key, values = stream_key(seed, name), table(kind, out.dtype, out.device)
    tiles = tiles_per_run(out.device)
    jobs = [(flat[start:start + count], start, run)
            for start, count in (segments if segments is not None else [(0, flat.numel())]) if count > 0
            for run in _runs(start, count, tiles)]
    threads = torch.get_num_threads()
    # a pool only pays for itself over many tiles: starting one per small tensor cost a tiny case
    # 6x its generation time (each job writes its own slice, so the bytes are the same either way)
    elements = sum(target.numel() for target, _, _ in jobs)
    workers = min(threads, elements // (_TILES_PER_THREAD * _TILE_ELEMS)) if out.device.type == "cpu" else 1
    if workers <= 1:
        for target, start, run in jobs:
            _fill_run(target, key, start, values, run, tiles)
        return out
    # small ops on one core each, the pool spreads tiles over cores; torch's own threads
    # would split these ops again and oversubscribe the cores meanwhile
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(workers) as pool:
            for _ in pool.map(lambda job: _fill_run(job[0], key, job[1], values, job[2], tiles), jobs, chunksize=8):
                pass
    finally:
        torch.set_num_threads(threads)
    return out


def tiles_per_run(device: torch.device) -> int:
    """Tiles hashed per group of torch ops: one on the CPU (it stays in L2), a block elsewhere."""
    return 1 if device.type == "cpu" else _DEVICE_TILES


def draw(seed: int, name: str, shape: tuple[int, ...] | torch.Size, kind: str, dtype: torch.dtype,
         device: torch.device | str = "cpu") -> torch.Tensor:
    """A new tensor holding elements ``0 ..`` of stream (seed, name) (see ``fill``)."""
    return fill(torch.empty(tuple(shape), dtype=dtype, device=device), seed, name, kind)
