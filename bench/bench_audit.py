"""Audit cost: `harness audit` of the shipped tiny matrices against one plain run of them.

    python bench/bench_audit.py [--device cpu] [--mutants a,b] [CASE_FILES]

One process, side by side: a plain run with an empty golden cache, the audit (every
operator, head_perturbed's delta from the sensitivity search) with another empty
cache, then the plain run again on its now warm cache.  Prints each wall time, the
time of each of the audit's runs, the ratio audit / plain run and the goal
(issue 15): at most 1.2 x (number of mutants + 1), goldens computed once per case
(counted from the results' ``golden_cache_hit`` metric, every run of the audit
together).  The load average is printed before and after: on a shared machine
the ratio is the figure to read, not the seconds.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

from harness.audit.operators import parse_mutants
from harness.audit.session import run_audit
from harness.casefiles import load_paths
from harness.devices import Device
from harness.outcomes import Result
from harness.run.engine import Planned, RunOptions
from harness.run.spawn import WorkerOptions
from harness.run.session import execute
from harness.store import MemoryStore

CASES = Path(__file__).resolve().parent.parent / "cases"


def _options(device: str, tmp: Path, name: str) -> RunOptions:
    worker = WorkerOptions(log_dir=tmp / name / "logs", golden_cache=str(tmp / name / "goldens"))
    return RunOptions(devices=[Device(device)], worker=worker)


def plain_run(cases, options: RunOptions) -> tuple[float, list[Result]]:
    start = time.perf_counter()
    recorded = execute([Planned(i, c) for i, c in enumerate(cases)], options, MemoryStore())
    return time.perf_counter() - start, recorded.results


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--mutants", default=None, help="only these operators (default: all)")
    parser.add_argument("paths", nargs="*", help="case files (default: the shipped cases/*.yaml)")
    args = parser.parse_args()
    cases = load_paths(args.paths or sorted(str(p) for p in CASES.glob("*.yaml")))
    operators = parse_mutants(args.mutants)
    print(f"{len(cases)} cases from {' '.join(args.paths) or CASES.name + '/*.yaml'}, {len(operators)} mutants, device {args.device}")
    print(f"before: {_load()}, {os.cpu_count()} CPUs", flush=True)

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        plain_cold_s, plain = plain_run(cases, _options(args.device, tmp, "plain"))
        print(f"plain run, empty golden cache:  {plain_cold_s:7.1f} s", flush=True)

        marks: list[tuple[str, int, float]] = []
        golden: Counter[str] = Counter()          # case id -> goldens computed, the whole audit

        def on_result(_planned, result: Result) -> None:
            if result.metrics.get("golden_cache_hit") is False:
                golden[result.case_id] += 1

        start = time.perf_counter()
        audit = run_audit(cases, operators, _options(args.device, tmp, "audit"), MemoryStore(),
                          on_run=lambda name, n: marks.append((name, n, time.perf_counter())), on_result=on_result)
        audit_s = time.perf_counter() - start
        print(f"audit, empty golden cache:      {audit_s:7.1f} s  ({len(marks)} runs)", flush=True)

        plain_warm_s, _ = plain_run(cases, _options(args.device, tmp, "plain"))
        print(f"plain run again, warm cache:    {plain_warm_s:7.1f} s", flush=True)

    ends = [t for _, _, t in marks[1:]] + [start + audit_s]
    for (name, n, t), end in zip(marks, ends):
        print(f"  {name:<36} {n:4d} cases {end - t:7.1f} s")
    goal = 1.2 * (len(operators) + 1)
    score = audit.score
    print(f"audit score {score.killed}/{score.applicable}; head_perturbed_delta {audit.document()['head_perturbed_delta']}")
    print(f"ratio audit / plain run (empty cache): {audit_s / plain_cold_s:5.2f}   goal <= {goal:.1f} "
          f"= 1.2 x ({len(operators)} mutants + 1)   {'met' if audit_s / plain_cold_s <= goal else 'MISSED'}")
    print(f"ratio audit / plain run (warm cache):  {audit_s / plain_warm_s:5.2f}   "
          f"{'met' if audit_s / plain_warm_s <= goal else 'MISSED'} against the same goal")
    computed_plain = sum(1 for r in plain if r.metrics.get("golden_cache_hit") is False)
    twice = {i: n for i, n in golden.items() if n > 1}
    print(f"goldens computed by the audit: {sum(golden.values())} for {len(golden)} cases "
          f"(the plain run computed {computed_plain}); cases computed more than once: {len(twice)}"
          + (f" {sorted(twice)[:5]}" if twice else "") + f"   {'met' if not twice else 'MISSED'}")
    print(f"after: {_load()}")


if __name__ == "__main__":
    main()
