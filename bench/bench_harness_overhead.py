"""Harness overhead: N tiny cases through the engine (worker process, pipe, logs, timeouts)
side by side with a plain in-process loop doing the same generation, golden, kernel and checks.

    python bench/bench_harness_overhead.py [--cases 300] [--repeats 3]

Both sides compute every golden (no golden cache) so they do identical work: the loop
in its own process, the engine in the run's golden process (which writes each golden to
its own directory and hands the file to the worker).  The worker is warmed with one case
before timing.  Goals (issue 2): ≤ 5 ms per case of overhead, total ≤ 1.3x the loop.
Prints medians over --repeats, and what the golden process costs per case: its own time
on a miss (inputs generated, golden computed and written) and on a hit (a golden cache
that already holds every case), and the worker's read of the file.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from harness.goldens.cache import GoldenCache
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device, backend
from harness.run.engine import Engine, Planned, RunOptions
from harness.worker.execute import KernelLoader, execute_case
from harness.outcomes import Outcome
from harness.run.pool import WorkerOptions

OPS = ("rope_kv_write", "paged_decode_attention", "fused_rope_decode_attention")


def tiny_cases(n: int) -> list[Case]:
    cases = []
    for i in range(n):
        op = OPS[i % len(OPS)]
        cases.append(Case(case_id=f"bench[{op},seed={i}]", matrix="bench", source="bench", op=op,
                          kernel="reference", geometry=replace(PRESETS["tiny"], batch=4),
                          seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"), seed=i))
    return cases


def in_process_loop(cases: list[Case]) -> float:
    device = Device("cpu")
    be, loader, cache = backend(device), KernelLoader(), GoldenCache(None)
    execute_case(cases[0], device, be, cache, loader)          # same warm-up as the worker gets
    start = time.perf_counter()
    for case in cases:
        reply = execute_case(case, device, be, cache, loader)
        assert reply.outcome is Outcome.PASS, reply
    return time.perf_counter() - start


def through_engine(cases: list[Case], log_dir: Path, golden_cache: str = "",
                   prefetch: bool = True) -> tuple[float, list]:
    options = RunOptions(devices=[Device("cpu")], worker=WorkerOptions(log_dir=log_dir, golden_cache=golden_cache),
                         prefetch_goldens=prefetch)
    with Engine(options) as engine:
        engine.run_one(cases[0])                                # worker start-up and warm-up, not timed
        start = time.perf_counter()
        results = engine.run([Planned(i, c) for i, c in enumerate(cases)])
        elapsed = time.perf_counter() - start
    assert len(results) == len(cases) and all(r.outcome is Outcome.PASS for r in results)
    return elapsed, results


def golden_costs(results: list) -> tuple[float, float]:
    """Mean ms per case: the golden process's own time, and the worker's read of its file."""
    timings = [r.metrics["timings"] for r in results]
    process = statistics.mean(t["golden_s"] - t["golden_read_s"] for t in timings)
    return 1000 * process, 1000 * statistics.mean(t["golden_read_s"] for t in timings)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cases = tiny_cases(args.cases)
    loop_times, engine_times, serial_times, misses, hits, hit_times = [], [], [], [], [], []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):           # interleaved, so machine noise hits both sides alike
            loop_times.append(in_process_loop(cases))
            elapsed, results = through_engine(cases, Path(tmp) / f"logs{r}")
            engine_times.append(elapsed)
            misses.append(golden_costs(results))
            serial_times.append(through_engine(cases, Path(tmp) / f"serial{r}", prefetch=False)[0])
        warm = str(Path(tmp) / "goldens")
        through_engine(cases, Path(tmp) / "fill", warm)           # every golden in the cache
        for r in range(args.repeats):
            elapsed, results = through_engine(cases, Path(tmp) / f"hits{r}", warm)
            hit_times.append(elapsed)
            hits.append(golden_costs(results))
    loop, engine = statistics.median(loop_times), statistics.median(engine_times)
    n = len(cases)
    print(f"cases: {n} tiny ({', '.join(OPS)}), goldens computed on both sides, medians of {args.repeats}, "
          f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print(f"in-process loop : {loop:8.3f} s  ({1000 * loop / n:6.2f} ms/case)")
    print(f"harness engine  : {engine:8.3f} s  ({1000 * engine / n:6.2f} ms/case)")
    print(f"overhead        : {1000 * (engine - loop) / n:6.2f} ms/case   (goal <= 5 ms)")
    print(f"ratio           : {engine / loop:6.3f}x              (goal <= 1.3x)")
    serial = statistics.median(serial_times)
    print(f"without golden prefetch: {1000 * serial / n:6.2f} ms/case ({serial / loop:5.3f}x the loop)")
    for what, costs in (("miss", misses), ("hit", hits)):
        process, read = (statistics.median(c[i] for c in costs) for i in (0, 1))
        print(f"golden process ({what:4}): {process:6.2f} ms/case in the golden process, "
              f"{read:5.2f} ms/case reading its file in the worker")
    print(f"engine, warm golden cache: {1000 * statistics.median(hit_times) / n:6.2f} ms/case")


if __name__ == "__main__":
    main()
