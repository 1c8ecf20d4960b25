"""Latency verdicts under load (issue 38, item 6): how often identical pairs are decided SLOWER or
FASTER, and how often a slower kernel is decided SLOWER, each side in a new process every round.

    python bench/bench_latency_pairs.py [--identical 300] [--slower 60] [--slowdown 0.30] [--jobs 2]
        [--tenants 1] [--out pairs.jsonl]

A pair is what ``harness compare --latency`` does for one case of two refs since every ref's
workers are new in every round (``RefRunner.new_round``): in round r each side runs in a process
of its own, started for that round (A then B in even rounds, B then A in odd ones), timing the
kernel with the harness's own loop (``harness.worker.timing.time_kernel``, the CPU clock); after
every round the verdict is ``harness.latency.statistics.compare`` (the interval the compare
decides on, at every look), and the first verdict that is not UNSURE ends the pair, or
``--max-rounds`` (default ``MAX_ROUNDS``, as compare).  The kernel is ``bench_latency.spin``: the
same number of loop steps on both sides of an identical pair, ``1 + --slowdown`` times it on B of
a slower one.  The side processes are plain Python processes, not the harness's device workers
(forked from its CPU zygote, with the case's checks and the store around the timing): a
process's own speed (placement, memory layout) is in the figures, the rest of the harness's path
is not (``harness compare --latency`` on a ``tests/gitrepo.py`` ``make_latency_repo`` repository
measures that path; docs/benchmarks.md, "Verdicts under load").  Pairs of the two kinds are shuffled together (seeded) and ``--jobs``
run at once, so the load falls on both kinds alike; ``--tenants N`` adds N processes that each
start Python, import torch and multiply matrices on one thread, over and over (work a shared machine's other
users do, not a busy loop).  The same rounds are also read with the rule before issue 38's fix
(the 95% interval at every look from the 6th round): how often it decided SLOWER or FASTER on the
rounds each pair ran (a lower bound: it might have decided later than the pair stopped).

Each pair is a line of ``--out`` (JSON) as it ends (appended: several runs can share a file);
a summary every ``--every`` pairs and at the end, also on SIGTERM / Ctrl-C (what finished
counts); ``--summarize FILE`` prints the summary of every pair in a file.  Goals (issue 38): at least 300 identical
pairs under a load of 4 or more, at most 1% false SLOWER or FASTER; a 30% slowdown SLOWER at
least 95% of the time.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import statistics as pystats
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_latency import SideProcess  # noqa: E402  (the side process: bench_latency's, one per side and round)
from harness import stats  # noqa: E402
from harness.case import LatencySpec  # noqa: E402
from harness.latency.statistics import (CONF, LOOK_CONF, MAX_ROUNDS, Side, Verdict, compare,  # noqa: E402
                                        decide, round_ratios)

_TENANT = ("import torch\n"
           "torch.set_num_threads(1)\n"
           "a = torch.randn(384, 384)\n"
           "for _ in range(150):\n"
           "    a = torch.tanh(a @ a.T / 384)\n")


def old_rule(ratios: list[float], threshold: float) -> tuple[str, int]:
    """The rule before: the 95% sign-test interval at every look from round 6."""
    for n in range(6, len(ratios) + 1):
        got = decide(*stats.median_ci(ratios[:n], CONF), threshold)
        if got is not Verdict.UNSURE:
            return got.value, n
    return Verdict.UNSURE.value, len(ratios)


def pair(kind: str, work_a: int, work_b: int, spec: LatencySpec, threshold: float, max_rounds: int) -> dict:
    rounds_a: list[tuple[float, ...]] = []
    rounds_b: list[tuple[float, ...]] = []
    began = time.perf_counter()
    got = None
    for r in range(max_rounds):
        order = ((rounds_a, work_a), (rounds_b, work_b))
        for rounds, work in (order if r % 2 == 0 else order[::-1]):
            side = SideProcess()            # a new process for this side and round
            try:
                rounds.append(side.time(work, "cpu", spec))
            finally:
                side.close()
        got = compare(Side("a", tuple(rounds_a)), Side("b", tuple(rounds_b)), threshold)
        if got.verdict is not Verdict.UNSURE:
            break
    ratios = round_ratios(Side("a", tuple(rounds_a)), Side("b", tuple(rounds_b)))
    old, old_at = old_rule(ratios, threshold)
    return {"kind": kind, "verdict": got.verdict.value, "rounds": got.rounds, "ratio": got.ratio,
            "ci_low": got.ci_low, "ci_high": got.ci_high, "conf": got.conf, "why": got.why,
            "wall_s": time.perf_counter() - began, "load": os.getloadavg()[0], "ratios": ratios,
            "old_rule": old, "old_rule_at": old_at}


class Tenants:
    """``n`` threads, each running a Python process that imports torch and multiplies matrices, again
    and again, until stopped."""

    def __init__(self, n: int):
        self.stop = threading.Event()
        self.procs: dict[int, subprocess.Popen] = {}
        self.threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(n)]
        for t in self.threads:
            t.start()

    def _loop(self, i: int) -> None:
        while not self.stop.is_set():
            self.procs[i] = subprocess.Popen([sys.executable, "-c", _TENANT], stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL)
            self.procs[i].wait()

    def close(self) -> None:
        self.stop.set()
        for p in list(self.procs.values()):
            if p.poll() is None:
                p.kill()
        for t in self.threads:
            t.join(timeout=30)


def summary(rows: list[dict], loads: list[float]) -> list[str]:
    out = []
    for kind in ("identical", "slower"):
        got = [r for r in rows if r["kind"] == kind]
        if not got:
            continue
        n = len(got)
        counts = {v.value: sum(r["verdict"] == v.value for r in got) for v in Verdict}
        old = {v.value: sum(r["old_rule"] == v.value for r in got) for v in (Verdict.SLOWER, Verdict.FASTER)}
        rounds = pystats.median(r["rounds"] for r in got)
        wall = pystats.median(r["wall_s"] for r in got)
        spread = pystats.median(pystats.stdev(math.log(x) for x in r["ratios"]) for r in got if len(r["ratios"]) > 2)
        if kind == "identical":
            bad = counts["SLOWER"] + counts["FASTER"]
            out.append(f"identical pairs: {n}: {counts}; false SLOWER or FASTER {bad} ({100 * bad / n:.2f}%); "
                       f"median {rounds:g} rounds, {wall:.1f} s a pair, per-round ratios' log sd {spread:.3f} (median); "
                       f"the old rule (95% at every look from round 6) on the same rounds: {old}")
        else:
            out.append(f"slower pairs: {n}: {counts}; SLOWER {counts['SLOWER']} ({100 * counts['SLOWER'] / n:.1f}%); "
                       f"median {rounds:g} rounds, {wall:.1f} s a pair, log sd {spread:.3f}; old rule on the same rounds: {old}")
    if loads:
        out.append(f"load average (1 min) at the pairs' ends: {min(loads):.2f}-{max(loads):.2f}, "
                   f"median {pystats.median(loads):.2f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--identical", type=int, default=300, help="identical pairs (default 300)")
    ap.add_argument("--slower", type=int, default=60, help="pairs with B slower (default 60)")
    ap.add_argument("--slowdown", type=float, default=0.30)
    ap.add_argument("--threshold", type=float, default=0.05)
    ap.add_argument("--budget", type=float, default=0.02, help="sampling seconds per side per round")
    ap.add_argument("--work", type=int, default=10_000, help="loop steps of the kernel (about 0.5 ms)")
    ap.add_argument("--max-rounds", type=int, default=MAX_ROUNDS)
    ap.add_argument("--jobs", type=int, default=2, help="pairs run at once")
    ap.add_argument("--tenants", type=int, default=1, help="torch-importing, matrix-multiplying processes beside")
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--every", type=int, default=25, help="a summary every N pairs")
    ap.add_argument("--out", default=None, help="one JSON line per pair")
    ap.add_argument("--summarize", default=None, metavar="FILE",
                    help="run nothing: the summary of the pairs in FILE (an --out, of one run or several)")
    args = ap.parse_args()
    if args.summarize:
        with open(args.summarize) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        for line in summary(rows, [r["load"] for r in rows]):
            print(line)
        return
    spec = LatencySpec(warmup_s=0.01, budget_s=args.budget, target=0.02)
    kinds = ["identical"] * args.identical + ["slower"] * args.slower
    random.Random(args.seed).shuffle(kinds)
    slow_work = int(args.work * (1 + args.slowdown))
    start_load = os.getloadavg()
    print(f"start {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC; load average {start_load[0]:.2f} "
          f"{start_load[1]:.2f} {start_load[2]:.2f}; {args.identical} identical and {args.slower} pairs "
          f"{100 * args.slowdown:g}% slower, {args.jobs} at once, {args.tenants} tenant(s); a verdict on the "
          f"{100 * LOOK_CONF:g}% interval after every round, up to {args.max_rounds}", flush=True)
    rows: list[dict] = []
    loads: list[float] = []
    lock = threading.Lock()
    out = open(args.out, "a") if args.out else None
    stopping = threading.Event()

    def one(kind: str) -> None:
        if stopping.is_set():
            return
        row = pair(kind, args.work, slow_work if kind == "slower" else args.work, spec, args.threshold,
                   args.max_rounds)
        with lock:
            rows.append(row)
            loads.append(row["load"])
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
            if len(rows) % args.every == 0:
                print(f"-- {len(rows)} pairs, {time.strftime('%H:%M:%S', time.gmtime())} UTC", flush=True)
                for line in summary(rows, loads):
                    print("   " + line, flush=True)

    def stop(signum, frame):
        stopping.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    tenants = Tenants(args.tenants)
    pool = ThreadPoolExecutor(args.jobs)
    try:
        for f in [pool.submit(one, kind) for kind in kinds]:
            f.result()
    except KeyboardInterrupt:
        stopping.set()
        print("stopped: the figures below are the pairs that finished", flush=True)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        tenants.close()
        end_load = os.getloadavg()
        print(f"end {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC; load average {end_load[0]:.2f} "
              f"{end_load[1]:.2f} {end_load[2]:.2f}", flush=True)
        with lock:
            for line in summary(rows, loads):
                print(line, flush=True)
        if out:
            out.close()


if __name__ == "__main__":
    main()
