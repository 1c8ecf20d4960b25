"""Goldens are computed in a process that never imports the code under test (issue 13).

Each kernel in ``tests/kernels_under_test/golden_poison`` computes the right answer, but
changes torch in the process it is imported into.  Before the golden process, a golden
computed in such a process was stored in the golden cache, and a later clean run of a
correct kernel failed against it until the cache was deleted.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from helpers import KERNELS_UNDER_TEST
from harness import goldens
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device
from harness.outcomes import Outcome
from harness.run.engine import Engine, Planned, RunOptions
from harness.run.spawn import WorkerOptions
from harness.worker.inputs import generate

OPS = ("rope_kv_write", "paged_decode_attention", "fused_rope_decode_attention")


def cases(kernel: str) -> list[Case]:
    return [Case(case_id=f"{op}[seed=5]", matrix="t", source="test", op=op,
                 kernel=kernel if kernel == "reference" else f"{kernel}:{op}", geometry=PRESETS["tiny"],
                 seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"), seed=5, timeout_s=60.0)
            for op in OPS]


def run(kernel: str, tmp_path: Path, kernel_paths: tuple[str, ...], fork: bool = True):
    options = RunOptions(devices=[Device("cpu")], worker=WorkerOptions(
        log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "goldens"), kernel_paths=kernel_paths,
        fork_cpu_workers=fork))
    with Engine(options) as engine:
        results = engine.run([Planned(i, c) for i, c in enumerate(cases(kernel))])
        golden_pid = engine.goldens.pid
        worker_pids = {engine.workers[0].proc.pid} if engine.workers[0].proc else set()
    return results, golden_pid, worker_pids


def writers(root: Path) -> set[str]:
    found = set()
    for path in root.rglob("*.safetensors"):
        with safe_open(str(path), framework="pt") as f:
            found.add(f.metadata()["writer_pid"])
    return found


@pytest.fixture
def poisoned_site(tmp_path) -> Path:
    """A directory on the kernel path whose ``sitecustomize`` sets float64 as torch's default dtype
    when a worker interpreter starts: the poison is in place before the first golden."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import torch\ntorch.set_default_dtype(torch.float64)\n")
    return site


@pytest.mark.parametrize("kernel", ["golden_poison.poisons_goldens", "golden_poison.swaps_rsqrt"])
def test_a_kernel_that_changes_torch_on_import_leaves_the_golden_cache_clean(tmp_path, kernel):
    poisoned, golden_pid, worker_pids = run(kernel, tmp_path, (str(KERNELS_UNDER_TEST),))
    assert all(r.outcome is Outcome.CONTRACT for r in poisoned), [(r.case_id, r.summary) for r in poisoned]
    assert writers(tmp_path / "goldens") == {str(golden_pid)}      # only the golden process wrote
    assert golden_pid not in worker_pids
    clean, _, _ = run("reference", tmp_path, (str(KERNELS_UNDER_TEST),))
    assert [r.outcome for r in clean] == [Outcome.PASS] * len(OPS), [(r.case_id, r.summary) for r in clean]
    assert all(r.metrics["golden_cache_hit"] for r in clean)


def test_a_poison_in_place_before_the_first_golden_never_reaches_the_cache(tmp_path, poisoned_site):
    """Spawned workers run the kernel path's ``sitecustomize`` at start-up; the goldens they used to
    compute and store then were float64-default goldens, and a clean run failed against them."""
    paths = (str(KERNELS_UNDER_TEST), str(poisoned_site))
    poisoned, golden_pid, _ = run("reference", tmp_path, paths, fork=False)
    assert writers(tmp_path / "goldens") == {str(golden_pid)}
    assert all(r.metrics["golden_source"] == f"golden process {golden_pid}" for r in poisoned)
    clean, _, _ = run("reference", tmp_path, (str(KERNELS_UNDER_TEST),), fork=False)
    assert [r.outcome for r in clean] == [Outcome.PASS] * len(OPS), [(r.case_id, r.summary) for r in clean]


def test_the_golden_process_goldens_equal_in_process_goldens_bit_for_bit(tmp_path):
    results, golden_pid, _ = run("reference", tmp_path, ())
    assert [r.outcome for r in results] == [Outcome.PASS] * len(OPS)
    for case in cases("reference"):
        ci = generate(case)
        expected = goldens.compute(case.op, ci.args, torch.float32, exact=True)
        [path] = [p for p in (tmp_path / "goldens" / case.op).glob("*.safetensors")
                  if not p.name.endswith(".intermediates.safetensors")]     # the goldens, not their intermediates
        with safe_open(str(path), framework="pt") as f:
            stored = {name: f.get_tensor(name) for name in f.keys()}
        assert set(stored) == set(expected)
        for name in expected:
            assert stored[name].dtype == expected[name].dtype and torch.equal(stored[name], expected[name]), name
