"""Real workers with kernels that print without end or leak memory (issue 13, item 12)."""
from __future__ import annotations

import textwrap

import pytest

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device
from harness.outcomes import Outcome
from harness.run.pool import DeviceWorker, _rss_bytes
from harness.run.spawn import WorkerOptions

KERNELS = """\
    import os
    from harness.kernels.reference import rope_kv_write as _reference

    _kept = []

    def noisy(**args):
        os.write(1, b"started\\n" + b"spam " * 600_000 + b"\\nfinished\\n")
        return _reference(**args)

    def leaky(**args):
        _kept.append(b"\\x01" * (40 << 20))      # touched pages: resident
        return _reference(**args)
    """


def _case(kernel: str, case_id: str) -> Case:
    return Case(case_id=case_id, matrix="t", source="test", op="rope_kv_write", kernel=kernel,
                geometry=PRESETS["tiny"], seq_lens=SeqLens("const", (1,)), slot_mode=SlotMode("arange"),
                seed=3, timeout_s=60.0)


@pytest.fixture
def worker(tmp_path):
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "hostilek.py").write_text(textwrap.dedent(KERNELS))
    options = WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "goldens"),
                            kernel_paths=(str(tmp_path / "k"),), max_log_bytes=64 << 10,
                            rss_growth_warn_bytes=100 << 20)
    w = DeviceWorker(Device("cpu"), options)
    yield w
    w.close()


def test_a_kernel_that_prints_3_mb_leaves_a_capped_log(worker, tmp_path):
    log = tmp_path / "noisy.log"
    result = worker.run(_case("hostilek:noisy", "noisy"), log)
    assert result.outcome is Outcome.PASS, result.summary
    text = log.read_text()
    assert log.stat().st_size < (64 << 10) + 100
    assert text.startswith("started") and text.rstrip().endswith("finished") and "bytes dropped ...]" in text
    assert worker.warnings == []


@pytest.mark.skipif(_rss_bytes(1) is None, reason="no /proc here: RSS is not read")
def test_a_kernel_that_leaks_gets_one_warning_with_the_figure(worker, tmp_path):
    for i in range(5):
        assert worker.run(_case("hostilek:leaky", f"leak{i}"), tmp_path / f"l{i}.log").outcome is Outcome.PASS
    (warning,) = worker.warnings
    assert "grew by" in warning and "MiB of resident memory over" in warning and "leaking" in warning
    grown = int(warning.split("grew by ")[1].split(" MiB")[0])
    assert grown >= 100


def test_a_steady_kernel_gets_no_warning(worker, tmp_path):
    for i in range(4):
        assert worker.run(_case("reference", f"ok{i}"), tmp_path / f"o{i}.log").outcome is Outcome.PASS
    assert worker.warnings == []
