"""Latency statistics on this machine: false SLOWER/FASTER for identical kernels, detection of a
slowdown, samples and wall time per decision, and the timing loop's own cost per sample.

    python bench/bench_latency.py [--trials 50] [--slowdown 0.10] [--threshold 0.05] [--budget 0.03]

A trial is what ``harness compare --latency`` does for one case, in one process: two sides timed
in rounds (A, B, then B, A), each round ``harness.worker.timing.time_kernel`` on each side, the
verdict (``harness.latency.statistics.compare``) after ``MIN_ROUNDS`` rounds and after each round
from there on, until it is not UNSURE or ``--max-rounds`` (default ``MAX_ROUNDS``, as compare).  The kernels are a loop of a fixed number of
integer steps (``spin``): identical work on both sides for the false-alarm trials, ``1 +
--slowdown`` times it on B for the detection trials.  Trials of the two kinds alternate, so
the machine's load falls on both alike.  ``--tenants N`` adds N busy-loop processes
for the length of the trials (extra load, said in the output).  By default in one process, not one
worker per side as compare runs them: the process-level differences two workers can have
(placement, memory layout) are not in those figures.  ``--sides process`` times each side in its
own process, new for each trial and kept for its rounds (as a compare keeps each ref's worker
warm); ``--sides fresh`` a new process for each side in each round; ``--pin CPU`` pins the side
processes to one CPU.  Goals (issue 25): false SLOWER
≤ 2%, detection of a 10% slowdown ≥ 90%, loop overhead ≤ 5 µs per sample on the host.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

from harness.case import LatencySpec
from harness.latency.statistics import MAX_ROUNDS, MIN_ROUNDS, Side, Verdict, compare
from harness.worker.timing import CpuTimer, HostTimer, time_kernel


def spin(n: int) -> int:
    acc = 0
    for i in range(n):
        acc += i * i
    return acc


_SIDE_PY = r"""
import json, sys
from harness.case import LatencySpec
from harness.worker.timing import CpuTimer, HostTimer, time_kernel
sys.path.insert(0, sys.argv[1])
from bench_latency import spin
for line in sys.stdin:
    work, clock, spec = json.loads(line)
    timer = (CpuTimer if clock == "cpu" else HostTimer)(lambda: None)
    t = time_kernel(lambda: spin(work), timer, LatencySpec(**spec))
    print(json.dumps(list(t.samples_s)), flush=True)
"""


class SideProcess:
    """One side's own process for a trial, as a compare's warm worker per ref (``--sides process``);
    ``cpu``: pinned to that CPU (``--pin``: both sides on one)."""

    def __init__(self, cpu: int | None = None):
        self.proc = subprocess.Popen([sys.executable, "-c", _SIDE_PY, os.path.dirname(os.path.abspath(__file__))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if cpu is not None:
            os.sched_setaffinity(self.proc.pid, {cpu})

    def time(self, work: int, clock: str, spec: LatencySpec) -> tuple[float, ...]:
        self.proc.stdin.write(json.dumps([work, clock, {"warmup_s": spec.warmup_s, "budget_s": spec.budget_s,
                                                        "target": spec.target}]) + "\n")
        self.proc.stdin.flush()
        return tuple(json.loads(self.proc.stdout.readline()))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def trial(work_a: int, work_b: int, spec: LatencySpec, threshold: float, max_rounds: int, clock: str,
          sides: tuple[SideProcess, SideProcess] | str | None = None, pin: int | None = None):
    timer = (CpuTimer if clock == "cpu" else HostTimer)(lambda: None)
    rounds_a, rounds_b, samples = [], [], 0
    began = time.perf_counter()
    got = None
    for r in range(max_rounds):
        order = ((rounds_a, work_a, 0), (rounds_b, work_b, 1))
        for rounds, work, i in (order if r % 2 == 0 else order[::-1]):
            if sides is None:
                t = time_kernel(lambda w=work: spin(w), timer, spec).samples_s
            elif sides == "fresh":          # a new process for this side and round
                side = SideProcess(pin)
                try:
                    t = side.time(work, clock, spec)
                finally:
                    side.close()
            else:
                t = sides[i].time(work, clock, spec)
            rounds.append(t)
            samples += len(t)
        if r + 1 >= MIN_ROUNDS:
            got = compare(Side("a", tuple(rounds_a)), Side("b", tuple(rounds_b)), threshold)
            if got.verdict is not Verdict.UNSURE:
                break
    return got, samples, time.perf_counter() - began


@contextlib.contextmanager
def tenants(n: int):
    """``n`` busy-loop processes for the length of the block: another tenant's load."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def loop_overhead(clock: str, n: int = 20000) -> tuple[float, float, float]:
    """(median sample of an empty call, wall and CPU time per sample of the whole loop): what a
    sample costs beyond the kernel.  The CPU figure leaves out time the box gave other processes."""
    timer = (CpuTimer if clock == "cpu" else HostTimer)(lambda: None)
    spec = LatencySpec(warmup_s=0.0, target=0.0, budget_s=1e9, min_samples=n, max_samples=n)
    cpu0 = time.process_time()
    t = time_kernel(lambda: None, timer, spec)
    return t.median_s, t.wall_s / n, (time.process_time() - cpu0) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=50, help="trials of each kind (default 50)")
    ap.add_argument("--slowdown", type=float, default=0.10)
    ap.add_argument("--threshold", type=float, default=0.05)
    ap.add_argument("--budget", type=float, default=0.03, help="sampling seconds per side per round")
    ap.add_argument("--work", type=int, default=10_000, help="loop steps of the kernel (about 0.5 ms)")
    ap.add_argument("--max-rounds", type=int, default=MAX_ROUNDS)
    ap.add_argument("--tenants", type=int, default=0, help="busy-loop processes running beside the trials")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--sides", choices=("inline", "process", "fresh"), default="inline",
                    help="inline: both sides in this process; process: each side its own process, new for "
                         "each trial and kept for its rounds, as a compare's warm worker per ref; fresh: a new "
                         "process for each side in each round (what a compare would do with workers renewed "
                         "every round)")
    ap.add_argument("--pin", type=int, default=None, metavar="CPU",
                    help="with --sides process: both side processes pinned to this CPU")
    ap.add_argument("--skip-loop-overhead", action="store_true")
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    for clock in () if args.skip_loop_overhead else ("cpu", "wall"):
        sample, per, cpu = loop_overhead(clock)
        print(f"loop overhead ({clock} clock): an empty call's sample {sample * 1e6:.2f} µs (the timer); the whole "
              f"loop per sample {cpu * 1e6:.2f} µs CPU, {per * 1e6:.2f} µs wall")
    spec = LatencySpec(warmup_s=0.01, budget_s=args.budget, target=0.02)
    slow_work = int(args.work * (1 + args.slowdown))
    same: list = []
    slow: list = []
    loads = []
    if args.sides == "fresh":
        print("each side in a new process for each round", flush=True)
    if args.sides == "process":
        print(f"each side in its own process, new for each trial{f', both pinned to CPU {args.pin}' if args.pin is not None else ''}",
              flush=True)
    with tenants(args.tenants):
        if args.tenants:
            print(f"{args.tenants} busy-loop tenant(s) running beside the trials", flush=True)
        for i in range(args.trials):
            for work_b, into in ((args.work, same), (slow_work, slow)):
                with contextlib.ExitStack() as stack:
                    procs = None
                    if args.sides == "process":
                        procs = (SideProcess(args.pin), SideProcess(args.pin))
                        for p in procs:
                            stack.callback(p.close)
                    elif args.sides == "fresh":
                        procs = "fresh"
                    into.append(trial(args.work, work_b, spec, args.threshold, args.max_rounds, args.clock, procs,
                                      args.pin))
            loads.append(os.getloadavg()[0])
            if (i + 1) % 10 == 0:
                print(f"  {i + 1}/{args.trials} trials of each kind, load {loads[-1]:.2f}", flush=True)

    def verdicts(rows):
        return {v.value: sum(1 for g, _, _ in rows if g.verdict is v) for v in Verdict}

    def costs(rows):
        return (statistics.median(s for _, s, _ in rows), statistics.median(w for _, _, w in rows),
                statistics.median(g.rounds for g, _, _ in rows))

    n = args.trials
    vs, vd = verdicts(same), verdicts(slow)
    print(f"identical kernels ({n} trials, threshold {100 * args.threshold:g}%, {args.clock} clock): {vs}; "
          f"false SLOWER {100 * vs['SLOWER'] / n:.1f}%, false FASTER {100 * vs['FASTER'] / n:.1f}% (goal <= 2%)")
    print(f"kernel {100 * args.slowdown:g}% slower ({n} trials): {vd}; detected SLOWER {100 * vd['SLOWER'] / n:.1f}% "
          f"(goal >= 90%)")
    for name, rows in (("identical", same), ("slower", slow)):
        s, w, r = costs(rows)
        print(f"per decision ({name}): median {s:.0f} samples, {w:.2f} s wall, {r:.0f} rounds")
    print(f"load average during the trials: {min(loads):.2f}-{max(loads):.2f}; after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
