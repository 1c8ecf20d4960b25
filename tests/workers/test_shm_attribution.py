"""A file that appears in /dev/shm during a case's window is the kernel's only when the worker made
it or holds it: another process of the same user (a browser, another test's worker) making one
at the same moment is no finding against an innocent kernel, which it was (a correct kernel read
CONTRACT in a parallel test run); a block the kernel keeps mapped is still found."""
from __future__ import annotations

import os
import threading
import time

import pytest

from helpers import KERNELS_UNDER_TEST
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device
from harness.outcomes import Outcome
from harness.run.pool import DeviceWorker
from harness.run.spawn import WorkerOptions

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm here")

NEIGHBOUR = f"/dev/shm/neighbour-{os.getpid()}"
BLOCK = f"kept-block-{os.getpid()}"


def case(kernel: str, case_id: str) -> Case:
    return Case(case_id=case_id, matrix="t", source="test", op="rope_kv_write",
                kernel=f"hostile.shm_neighbours:{kernel}", geometry=PRESETS["tiny"],
                seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"), seed=3, timeout_s=60.0)


@pytest.fixture
def worker(tmp_path):
    signals = tmp_path / "signals"
    signals.mkdir()
    options = WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "goldens"),
                            kernel_paths=(str(KERNELS_UNDER_TEST),),
                            base_env={**os.environ, "SHM_TEST_SIGNALS": str(signals), "SHM_TEST_BLOCK": BLOCK})
    w = DeviceWorker(Device("cpu"), options)
    yield w, signals
    w.close()
    for path in (NEIGHBOUR, f"/dev/shm/{BLOCK}"):
        if os.path.exists(path):
            os.unlink(path)


def test_a_neighbours_file_made_during_the_window_is_not_the_kernels(worker, tmp_path):
    w, signals = worker

    def neighbour():
        deadline = time.monotonic() + 60
        while not (signals / "running").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        with open(NEIGHBOUR, "wb") as f:        # this test process, not the worker: a neighbour
            f.write(b"\0" * 4096)
        (signals / "made").touch()
    t = threading.Thread(target=neighbour)
    t.start()
    reply = w.run(case("waits_while_a_neighbour_writes", "neighbour"), tmp_path / "n.log")
    t.join()
    assert os.path.exists(NEIGHBOUR)              # it was there, made inside the window
    assert reply.outcome is Outcome.PASS, (reply.summary, reply.report)


def test_a_block_the_kernel_keeps_mapped_is_found(worker, tmp_path):
    w, _ = worker
    reply = w.run(case("keeps_shared_memory", "kept"), tmp_path / "k.log")
    assert reply.outcome is Outcome.CONTRACT, (reply.summary, reply.report)
    assert f"1 file(s) in /dev/shm: {BLOCK}" in reply.report, reply.report
