"""CPU device workers for the worker-tier tests, with the kernels under test on their path,
closed at the test's end (``helpers.hostile_case`` makes the cases they run)."""
from __future__ import annotations

import pytest

from helpers import KERNELS_UNDER_TEST
from harness.devices import Device
from harness.run.pool import DeviceWorker
from harness.run.spawn import WorkerOptions


@pytest.fixture
def make_worker(tmp_path):
    """``make(fork=True)``: a CPU worker with the hostile kernels on its path (forked from the zygote,
    or spawned); every one made is closed when the test ends."""
    made: list[DeviceWorker] = []

    def make(fork: bool = True) -> DeviceWorker:
        options = WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "goldens"),
                                kernel_paths=(str(KERNELS_UNDER_TEST),), fork_cpu_workers=fork)
        made.append(DeviceWorker(Device("cpu"), options))
        return made[-1]

    yield make
    for w in made:
        w.close()


@pytest.fixture
def worker(make_worker):
    return make_worker()
