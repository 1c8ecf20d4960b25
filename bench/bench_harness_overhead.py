"""Harness overhead: N tiny cases through the engine (worker process, pipe, logs, timeouts)
side by side with a plain in-process loop doing the same generation, golden, kernel and checks.

    python bench/bench_harness_overhead.py [--cases 300] [--rounds 6] [--threads 1]

Both sides compute every golden (no golden cache) so they do identical work: the loop
in its own process, the engine in the run's golden process (which writes each golden to
its own directory and hands the file to the worker).  The worker is warmed with one case
before timing.  Goals (issue 2): ≤ 5 ms per case of overhead, total ≤ 1.3x the loop.
Both sides run in rounds (every side once per round, the order rotating) under identical
settings (the same torch thread count in this process as in the engine's processes), and the
ratio is the latency compare's (the median of per-round ratios with its sign-test 95% interval,
Hodges-Lehmann under 6 rounds; docs/latency.md), each side's noise printed beside it.
Prints medians over the rounds, and what the golden process costs per case: its own time
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
from harness.latency.statistics import CONF, Side, compare
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device, backend
from harness.run.engine import Engine, Planned, RunOptions
from harness.worker.execute import KernelLoader, execute_case
from harness.outcomes import Outcome
from harness.run.spawn import WorkerOptions

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
    bad = [(r.case_id, r.outcome.value, r.summary) for r in results if r.outcome is not Outcome.PASS]
    assert len(results) == len(cases) and not bad, bad[:3]
    return elapsed, results


def golden_costs(results: list) -> tuple[float, float]:
    """Mean ms per case: the golden process's own time, and the worker's read of its file."""
    timings = [r.metrics["timings"] for r in results]
    process = statistics.mean(t["golden_s"] - t["golden_read_s"] for t in timings)
    return 1000 * process, 1000 * statistics.mean(t["golden_read_s"] for t in timings)


def _noise(xs: list[float]) -> str:
    """The spread of one side's per-round figures: (max - min) / median."""
    return f"±{50 * (max(xs) - min(xs)) / statistics.median(xs):.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--rounds", "--repeats", dest="rounds", type=int, default=6,
                        help="rounds; each round runs every side once, in a rotating order (default 6)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of every process on both sides (default 1: what the golden process "
                             "gives a tiny golden; the engine's workers inherit OMP_NUM_THREADS)")
    args = parser.parse_args()
    # Identical settings on both sides: the same thread count (and so the same OpenMP wait policy
    # at work) in this process as in the engine's worker and golden processes.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    cases = tiny_cases(args.cases)
    sides = {"loop": [], "engine": [], "serial": [], "hits": []}
    misses, hits = [], []
    load = os.getloadavg()[0]
    n = len(cases)
    with tempfile.TemporaryDirectory() as tmp:
        warm = str(Path(tmp) / "goldens")
        through_engine(cases, Path(tmp) / "fill", warm)           # every golden in the cache, for the hit side

        def engine_side(r):
            elapsed, results = through_engine(cases, Path(tmp) / f"logs{r}")
            misses.append(golden_costs(results))
            return elapsed

        def hit_side(r):
            elapsed, results = through_engine(cases, Path(tmp) / f"hits{r}", warm)
            hits.append(golden_costs(results))
            return elapsed

        runs = {"loop": lambda r: in_process_loop(cases), "engine": engine_side,
                "serial": lambda r: through_engine(cases, Path(tmp) / f"serial{r}", prefetch=False)[0],
                "hits": hit_side}
        order = list(runs)
        for r in range(args.rounds):           # rounds, the order rotating: machine noise falls on every side alike
            for name in order[r % len(order):] + order[:r % len(order)]:
                sides[name].append(1000 * runs[name](r) / n)
    ratio = compare(Side("loop", tuple((x,) for x in sides["loop"])),
                    Side("engine", tuple((x,) for x in sides["engine"])), conf=CONF)   # one look: 95%, as printed
    med = {name: statistics.median(xs) for name, xs in sides.items()}
    print(f"cases: {n} tiny ({', '.join(OPS)}), goldens computed on both sides, {args.rounds} rounds "
          f"(sides interleaved, order rotating), torch threads {args.threads} everywhere, "
          f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print(f"in-process loop : {med['loop']:6.2f} ms/case (median of rounds, noise {_noise(sides['loop'])})")
    print(f"harness engine  : {med['engine']:6.2f} ms/case (median of rounds, noise {_noise(sides['engine'])})")
    print(f"overhead        : {med['engine'] - med['loop']:6.2f} ms/case   (goal <= 5 ms)")
    print(f"ratio           : {ratio.ratio:6.3f}x, 95% CI {ratio.ci_low:.3f}-{ratio.ci_high:.3f} "
          f"(median of per-round ratios, sign-test CI; docs/latency.md)   (goal <= 1.3x)")
    print(f"without golden prefetch: {med['serial']:6.2f} ms/case ({med['serial'] / med['loop']:5.3f}x the loop, "
          f"noise {_noise(sides['serial'])})")
    for what, costs in (("miss", misses), ("hit", hits)):
        process, read = (statistics.median(c[i] for c in costs) for i in (0, 1))
        print(f"golden process ({what:4}): {process:6.2f} ms/case in the golden process, "
              f"{read:5.2f} ms/case reading its file in the worker")
    print(f"engine, warm golden cache: {med['hits']:6.2f} ms/case (noise {_noise(sides['hits'])})")


if __name__ == "__main__":
    main()
