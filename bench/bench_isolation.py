"""What ``--isolation case`` costs per case against the warm default (issue 37, item 1).

    python bench/bench_isolation.py [--cases 20] [--rounds 3] [--op rope_kv_write]

Runs the same tiny CPU cases through the engine with ``isolation="warm"`` and ``"case"``, rounds
interleaved so that a load change reaches both, goldens cached before the first round (they are
the golden process's cost either way).  Prints wall seconds per case (median of the rounds), the
ratio and the extra per case, with the load average before and after: the host is shared.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device
from harness.run.engine import Engine, Planned, RunOptions
from harness.run.spawn import WorkerOptions


def cases(op: str, n: int) -> list[Case]:
    return [Case(case_id=f"bench-{i}", matrix="bench", source="bench", op=op, kernel="reference",
                 geometry=PRESETS["tiny"], seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"),
                 seed=i, timeout_s=120.0) for i in range(n)]


def per_case_s(tmp: Path, mode: str, batch: list[Case]) -> float:
    worker = WorkerOptions(log_dir=tmp / f"logs-{mode}-{time.monotonic_ns()}", golden_cache=str(tmp / "goldens"),
                           isolation=mode)
    with Engine(RunOptions(devices=[Device("cpu")], worker=worker)) as engine:
        engine.run([Planned(0, replace(batch[0], case_id="warm-up"))])    # the worker and golden process start
        start = time.perf_counter()
        results = engine.run([Planned(i, c) for i, c in enumerate(batch)])
        took = time.perf_counter() - start
    bad = [r for r in results if r.outcome.value != "PASS"]
    assert not bad, [(r.case_id, r.summary) for r in bad]
    return took / len(batch)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--op", default="rope_kv_write")
    args = parser.parse_args()
    batch = cases(args.op, args.cases)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-isolation-") as tmp:
        per_case_s(Path(tmp), "warm", batch)          # goldens into the cache: not what is measured
        times: dict[str, list[float]] = {"warm": [], "case": []}
        for _ in range(args.rounds):
            for mode in times:
                times[mode].append(per_case_s(Path(tmp), mode, batch))
    warm, isolated = statistics.median(times["warm"]), statistics.median(times["case"])
    print(f"{args.cases} {args.op} cases (tiny, cpu) x {args.rounds} rounds; {os.cpu_count()} cpus; "
          f"load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
    for mode, runs in times.items():
        print(f"  {mode:5s} {statistics.median(runs) * 1e3:8.1f} ms per case  (rounds: "
              f"{', '.join(f'{t * 1e3:.1f}' for t in runs)})")
    print(f"  case / warm: {isolated / warm:.2f}x, +{(isolated - warm) * 1e3:.1f} ms per case")


if __name__ == "__main__":
    main()
