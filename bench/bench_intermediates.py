"""What ``--intermediates always`` costs beside ``off`` on the tiny matrices (docs/intermediates.md).

    python bench/bench_intermediates.py [--cases 30] [--rounds 3] [--threads 1] [--interleave run|case]

Runs the same cases of the shipped tier-ci matrices (every case's kernel replaced by the
reference, which dumps every intermediate) through the worker's ``execute_case`` in this
process, rounds of ``off`` and ``always`` side by side (the order alternating), goldens read
from one warm golden cache as a worker reads them.  ``--interleave run`` (the default) runs
all cases in one mode, then all in the other; ``--interleave case`` alternates the two modes
case by case inside a round, so both see the same moment of a shared machine's load.  Prints
ms/case of each round and its ``always`` / ``off`` ratio, the median and range of those
per-round ratios (the figure to quote: each is taken side by side), the median and minimum
of each mode and their ratios, the time the dump path itself took inside the ``always``
rounds (a figure the load moves less than the difference of two rounds), and the load
average before and after (the machine is shared).  Beside the wall clock it reports this
thread's CPU time per case (``time.thread_time``): with torch on ``--threads 1`` (the default)
that is every cycle a case costs, and on a shared machine it moves far less with the load than
the wall clock, which counts the time the scheduler gave to others.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import replace

import torch

from harness.casefiles import load_paths
from harness.devices import Device, backend
from harness.goldens.cache import GoldenCache
from harness.worker import dumps
from harness.worker.execute import KernelLoader, execute_case


class Timed:
    """Seconds spent in the dump path (every ``dump`` call and the file folder's reading): the
    part of an ``always`` case that ``off`` does not pay, measured inside the same run."""

    def __init__(self) -> None:
        self.seconds = self.cpu_seconds = 0.0
        for name in ("__call__", "read_folder"):
            real = getattr(dumps.Collector, name)
            setattr(dumps.Collector, name, self._wrap(real))

    def _wrap(self, real):
        def timed(*args, **kwargs):
            start, start_cpu = time.perf_counter(), time.thread_time()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.cpu_seconds += time.thread_time() - start_cpu
        return timed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cases(n: int):
    everything = [c for c in load_paths([os.path.join(ROOT, "cases")]) if c.tier == "ci"]
    step = max(1, len(everything) // n)
    return [replace(c, kernel="reference", env={}) for c in everything[::step][:n]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's intra-op threads (1: the CPU time below is all of a case's work; "
                             "0: torch's default, as a worker runs)")
    parser.add_argument("--interleave", choices=("run", "case"), default="run",
                        help="run: a round runs every case in one mode, then in the other; "
                             "case: the two modes alternate case by case")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    chosen = cases(args.cases)
    device = Device("cpu")
    be, loader = backend(device), KernelLoader()
    print(f"load before: {os.getloadavg()}; torch threads {torch.get_num_threads()}; interleave {args.interleave}; "
          f"{len(chosen)} cases: "
          f"{', '.join(sorted({c.op for c in chosen}))}")
    with tempfile.TemporaryDirectory() as root:
        cache = GoldenCache(root)
        for c in chosen:                       # warm: goldens in the cache, imports done
            execute_case(c, device, be, cache, loader, intermediates="always")
        times: dict[str, list[float]] = {"off": [], "always": []}
        cpu: dict[str, list[float]] = {"off": [], "always": []}
        timed, dumped, dumped_cpu = Timed(), [], []
        for r in range(args.rounds):
            order = ("off", "always") if r % 2 == 0 else ("always", "off")
            wall, clock = {"off": 0.0, "always": 0.0}, {"off": 0.0, "always": 0.0}
            before, before_cpu = timed.seconds, timed.cpu_seconds
            # one mode's whole round, then the other's; or the two modes case by case
            steps = ([(mode, chosen) for mode in order] if args.interleave == "run"
                     else [(mode, [c]) for c in chosen for mode in order])
            for mode, batch in steps:
                start, start_cpu = time.perf_counter(), time.thread_time()
                for c in batch:
                    reply = execute_case(c, device, be, cache, loader, intermediates=mode)
                    assert reply.failure is None and reply.outcome.passed, (c.case_id, reply.summary)
                wall[mode] += time.perf_counter() - start
                clock[mode] += time.thread_time() - start_cpu
            for mode in order:
                times[mode].append(wall[mode] / len(chosen) * 1e3)
                cpu[mode].append(clock[mode] / len(chosen) * 1e3)
            dumped.append((timed.seconds - before) / len(chosen) * 1e3)
            dumped_cpu.append((timed.cpu_seconds - before_cpu) / len(chosen) * 1e3)
            print(f"round {r}: off {times['off'][-1]:.2f} ms/case, always {times['always'][-1]:.2f} ms/case "
                  f"({times['always'][-1] / times['off'][-1]:.3f}); CPU off {cpu['off'][-1]:.2f}, "
                  f"always {cpu['always'][-1]:.2f} ms/case ({cpu['always'][-1] / cpu['off'][-1]:.3f})")
    for clock, figures in (("wall", times), ("CPU", cpu)):
        ratios = [a / o for a, o in zip(figures["always"], figures["off"])]
        print(f"{clock} always / off of each round: median {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} rounds)")
        for name, pick in (("median", statistics.median), ("min", min)):
            off, always = pick(figures["off"]), pick(figures["always"])
            print(f"{clock} {name}: off {off:.2f} ms/case, always {always:.2f} ms/case, ratio {always / off:.3f}")
    always, dump = statistics.median(times["always"]), statistics.median(dumped)
    print(f"inside the always rounds: the dump path {dump:.2f} ms/case of {always:.2f} "
          f"(always / (always - dumps) = {always / (always - dump):.3f})")
    always, dump = statistics.median(cpu["always"]), statistics.median(dumped_cpu)
    print(f"  in CPU time: the dump path {dump:.2f} ms/case of {always:.2f} "
          f"(always / (always - dumps) = {always / (always - dump):.3f})")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
