"""The golden process's life in a run: its failures, its replacement, the loud fallback, its own
directory under --no-golden-cache (harness/run/golden_process.py)."""
from __future__ import annotations

import os
import threading
import time
import signal
from pathlib import Path

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device
from harness.outcomes import Outcome
from harness.run.engine import Engine, Planned, RunOptions
from harness.run.golden_process import GoldenProcess
from harness.run.pool import DeviceWorker, log_name
from harness.run.spawn import WorkerOptions, WorkerStartError


def case(seed: int) -> Case:
    return Case(f"rope[seed={seed}]", "t", "test", "rope_kv_write", "reference", PRESETS["tiny"],
                SeqLens("multi_block"), SlotMode("arange"), seed, timeout_s=60.0)


def engine(tmp_path: Path, **worker) -> Engine:
    options = WorkerOptions(log_dir=tmp_path / "logs", **{"golden_cache": str(tmp_path / "goldens"), **worker})
    return Engine(RunOptions(devices=[Device("cpu")], worker=options))


def test_a_golden_process_that_died_is_replaced_for_the_next_case(tmp_path):
    with engine(tmp_path) as e:
        first = e.run_one(case(1))
        os.kill(e.goldens.pid, signal.SIGKILL)
        second = e.run_one(case(2))
        assert (first.outcome, second.outcome) == (Outcome.PASS, Outcome.PASS), second.summary
        assert e.goldens.starts == 2
        assert second.metrics["golden_source"] == f"golden process {e.goldens.pid}"


def test_a_golden_that_fails_is_a_harness_error_and_the_kernel_never_runs(tmp_path):
    with engine(tmp_path, golden_dtype="fp16") as e:
        result = e.run_one(case(1))
        assert result.outcome is Outcome.HARNESS_ERROR
        assert result.summary.startswith("harness failed in golden: KeyError"), result.summary
        assert not (tmp_path / "logs" / log_name(case(1).case_id, 0)).exists()     # never sent to the worker


def test_without_a_golden_process_the_worker_computes_goldens_and_the_run_says_so(tmp_path, monkeypatch):
    def cannot_start(self):
        raise WorkerStartError("the golden process did not start (test)")

    monkeypatch.setattr(GoldenProcess, "_start", cannot_start)
    with engine(tmp_path) as e:
        results = [e.run_one(case(seed)) for seed in (1, 2)]
        assert [r.outcome for r in results] == [Outcome.PASS, Outcome.PASS]
        assert all(r.metrics["golden_source"] == "device worker" for r in results)
        assert len(e.workers[0].warnings) == 1 and "could not start" in e.workers[0].warnings[0]
    assert not (tmp_path / "goldens").exists()          # the workers never write the cache


def test_no_golden_cache_keeps_goldens_for_the_run_only(tmp_path):
    with engine(tmp_path, golden_cache="") as e:
        first, again = e.run_one(case(1)), e.run_one(case(1))
        own = Path(e.goldens.cache_dir())
        assert (first.metrics["golden_cache_hit"], again.metrics["golden_cache_hit"]) == (False, True)
        assert list(own.rglob("*.safetensors"))
    assert not own.exists()


def test_a_device_worker_on_its_own_has_a_golden_process_of_its_own(tmp_path):
    worker = DeviceWorker(Device("cpu"), WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "g")))
    try:
        result = worker.run(case(1), tmp_path / "c.log")
        assert result.outcome is Outcome.PASS
        assert result.metrics["golden_source"] == f"golden process {worker.goldens.pid}"
        assert worker.goldens.pid != worker.proc.pid
    finally:
        worker.close()
    assert worker.goldens.pid is None


def test_closing_the_run_mid_golden_does_not_wait_for_the_golden(tmp_path):
    """Ctrl-C while a golden is being made: ``close`` kills the golden process under the request."""
    process = GoldenProcess(WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "g")), fork=True)
    assert process.request(case(1)).failure is None
    os.kill(process.pid, signal.SIGSTOP)                 # the next golden never comes
    replies = []
    thread = threading.Thread(target=lambda: replies.append(process.request(case(2))))
    thread.start()
    time.sleep(0.5)
    started = time.monotonic()
    process.close()
    thread.join(30)
    assert not thread.is_alive() and time.monotonic() - started < 15
    assert replies[0].failure is not None and replies[0].golden is None
