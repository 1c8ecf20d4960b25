"""Golden cache: run the 4-layer tiny decode matrix twice against one fresh cache directory.

    python bench/bench_golden_cache.py

Prints goldens computed and the summed golden phase (as the worker times it) of each run.
Goals (issue 2): the second run computes zero goldens and its golden phase is >= 10x faster.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from harness.devices import Device
from harness.run.engine import Engine, Planned, RunOptions
from harness.casefiles import load_matrix
from harness.run.spawn import WorkerOptions

MATRIX = Path(__file__).resolve().parent.parent / "cases" / "decode_layers.yaml"


def one_run(cases, cache_dir: Path, log_dir: Path) -> tuple[int, float, int]:
    options = RunOptions(devices=[Device("cpu")], worker=WorkerOptions(log_dir=log_dir, golden_cache=str(cache_dir)))
    with Engine(options) as engine:
        results = engine.run([Planned(i, c) for i, c in enumerate(cases)])
    computed = sum(1 for r in results if r.metrics.get("golden_cache_hit") is False)
    golden_s = sum(r.metrics["timings"]["golden_s"] for r in results)
    return computed, golden_s, len(results)


def main() -> None:
    cases = [c for c in load_matrix(MATRIX) if c.geometry.num_layers == 4]
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "goldens"
        first = one_run(cases, cache, Path(tmp) / "logs1")
        second = one_run(cases, cache, Path(tmp) / "logs2")
    print(f"matrix: {MATRIX.name}, num_layers=4: {first[2]} cases")
    print(f"run 1: goldens computed {first[0]:3d}, golden phase {1000 * first[1]:8.1f} ms")
    print(f"run 2: goldens computed {second[0]:3d}, golden phase {1000 * second[1]:8.1f} ms")
    print(f"golden phase speed-up: {first[1] / second[1]:.1f}x   (goal >= 10x, and 0 computed in run 2)")


if __name__ == "__main__":
    main()
