"""Flake-hunt overhead: a 100-iteration fixed-seed hunt of one tiny case, through the whole
hunt path (plan, stop rules, engine, worker, per-iteration bitwise comparison, store, summary),
side by side with an in-process loop doing the same kernel, checks and bitwise comparison.

    python bench/bench_flake_overhead.py [--iterations 100] [--repeats 3]

Both sides use a golden cache in a fresh directory, so each computes the golden once
(the hunt's count is printed: goal 1); the in-process loop does the determinism check
too (it is one of the checks), so the difference is the harness's own cost per
iteration: the pipe, the log redirect, the result record, the store write and the
summary.  Goal (issue 4): <= 5 ms per iteration.  Medians over --repeats, interleaved.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from harness.goldens.cache import GoldenCache
from harness.flake import hunt as flake
from harness.flake.summary import summarize_hunt
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.worker.determinism import Baselines
from harness.devices import Device, backend
from harness.outcomes import Outcome
from harness.run.engine import Engine, RunOptions
from harness.worker.execute import KernelLoader, execute_case
from harness.run.spawn import WorkerOptions
from harness.run.session import execute
from harness.store import Store


def tiny_case() -> Case:
    return Case(case_id="flake-bench[rope]", matrix="flake-bench", source="bench", op="rope_kv_write",
                kernel="reference", geometry=replace(PRESETS["tiny"], batch=4),
                seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"), seed=0)


def in_process_loop(case: Case, n: int, tmp: Path) -> float:
    device = Device("cpu")
    be, loader, cache, baselines = backend(device), KernelLoader(), GoldenCache(tmp / "goldens-loop"), Baselines()
    baseline = str(tmp / "loop-baseline.safetensors")
    execute_case(case.with_seed(99), device, be, cache, loader)       # warm-up (imports), other inputs
    start = time.perf_counter()
    for i in range(n):
        reply = execute_case(case, device, be, cache, loader, repeat=i, baseline=baseline, baselines=baselines)
        assert reply.outcome is Outcome.PASS and reply.metrics["determinism"]["identical"], reply
    return time.perf_counter() - start


def through_hunt(case: Case, n: int, tmp: Path) -> tuple[float, int]:
    options = RunOptions(devices=[Device("cpu")], worker=WorkerOptions(log_dir=tmp / "logs",
                                                                       golden_cache=str(tmp / "goldens-hunt")))
    hunt = flake.HuntOptions(repeat=n)
    with Engine(options) as engine, Store(tmp / "results.sqlite") as store:
        engine.run_one(case.with_seed(99))                              # worker start-up, not timed
        start = time.perf_counter()
        rules = flake.StopRules(hunt)
        recorded = execute(flake.plan([case], hunt), options, store, kind="flake", engine=engine,
                           on_result=lambda p, r: rules.record(r), should_run=rules.should_run)
        summary = summarize_hunt(recorded.results)[case.case_id]
        elapsed = time.perf_counter() - start
    assert summary.total == n and summary.failures == 0 and summary.determinism.identical, summary
    computed = sum(1 for r in recorded.results if r.metrics.get("golden_cache_hit") is False)
    return elapsed, computed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    case, n = tiny_case(), args.iterations
    loop_times, hunt_times, computed = [], [], []
    for r in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            loop_times.append(in_process_loop(case, n, Path(tmp)))
            elapsed, golden = through_hunt(case, n, Path(tmp))
            hunt_times.append(elapsed)
            computed.append(golden)
    loop, hunt = statistics.median(loop_times), statistics.median(hunt_times)
    print(f"hunt: 1 tiny rope_kv_write case x {n} iterations, seeds fixed (bitwise check on both sides), "
          f"medians of {args.repeats}")
    print(f"in-process loop : {loop:8.3f} s  ({1000 * loop / n:6.2f} ms/iteration)")
    print(f"harness flake   : {hunt:8.3f} s  ({1000 * hunt / n:6.2f} ms/iteration, store and summary included)")
    print(f"overhead        : {1000 * (hunt - loop) / n:6.2f} ms/iteration   (goal <= 5 ms)")
    print(f"goldens computed by the hunt: {computed}   (goal: 1 per hunt)")


if __name__ == "__main__":
    main()
