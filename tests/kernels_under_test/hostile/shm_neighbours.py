"""``rope_kv_write`` kernels around ``/dev/shm``, as an outsider writes them: a correct kernel that
takes a moment while another process of the same user makes a file there (a browser, another
test's worker), and a careless one that keeps a ``multiprocessing.shared_memory`` block alive in
a module global (its file made from C, never opened through Python)."""
from __future__ import annotations

import os
import time
from multiprocessing import shared_memory

from harness.kernels.reference import rope_kv_write as _reference

_kept = []


def waits_while_a_neighbour_writes(**args):
    """Says it is running (a file outside /dev/shm), then waits for the test to say it made its file."""
    out = _reference(**args)
    signal_dir = os.environ["SHM_TEST_SIGNALS"]
    with open(os.path.join(signal_dir, "running"), "w"):
        pass
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(signal_dir, "made")) and time.monotonic() < deadline:
        time.sleep(0.01)
    return out


def keeps_shared_memory(**args):
    out = _reference(**args)
    block = shared_memory.SharedMemory(name=os.environ["SHM_TEST_BLOCK"], create=True, size=4096)
    _kept.append(block)          # the mapping stays: the file stays
    return out
