"""Prefault a new large host tensor's pages before a generator writes into them.

A fresh allocation of many megabytes is a new anonymous mapping: none of its pages exist
yet, and the first write to each 4 KiB page traps into the kernel, which finds a zeroed
page and maps it.  For the qwen3-14b inputs (256 MB) those faults were the bulk of what
drawing the inputs cost beyond a fill of the same bytes.  ``madvise(MADV_POPULATE_WRITE)``
(Linux 5.14+) maps every page of a range writable in one call, as the faults would, without
touching the data: the bytes a generator then writes are the same, only sooner.

Where it is not available (another OS, an older kernel: ``EINVAL``; a libc without
``madvise``), or not worth it (a small tensor, a device tensor), nothing is done and the
caller goes on; the pages then fault in as before.
"""
from __future__ import annotations

import ctypes
import mmap
import sys
from functools import lru_cache

import torch

MADV_POPULATE_WRITE = 23        # <linux/mman.h>, Linux 5.14
MIN_BYTES = 1 << 20             # below this the faults cost less than the call


@lru_cache(maxsize=1)
def _madvise():
    """libc's ``madvise``, or None where there is none to call (loaded on first use, not at import)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


def prefault(tensor: torch.Tensor, min_bytes: int | None = None) -> bool:
    """Map the whole pages of ``tensor``'s storage writable now; True when the kernel did.

    Only the pages wholly inside the storage are advised (its first and last partial pages
    may hold other data and are left alone).  False, and nothing done, for a non-CPU
    tensor, one under ``min_bytes`` (default ``MIN_BYTES``), or where the call is unsupported
    or fails."""
    if tensor.device.type != "cpu":
        return False
    storage = tensor.untyped_storage()
    start, size = storage.data_ptr(), storage.nbytes()
    if size < (MIN_BYTES if min_bytes is None else min_bytes):
        return False
    madvise = _madvise()
    if madvise is None:
        return False
    page = mmap.PAGESIZE
    first = -(-start // page) * page
    last = (start + size) // page * page
    if last <= first:
        return False
    return madvise(first, last - first, MADV_POPULATE_WRITE) == 0


def empty(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """``torch.empty`` whose pages are already mapped (``prefault``) when it is a large host tensor."""
    out = torch.empty(tuple(shape), dtype=dtype, device=device)
    prefault(out)
    return out
