"""What ``--intermediates always`` costs beside ``off`` on the tiny matrices (docs/intermediates.md).

    python bench/bench_intermediates.py [--cases 30] [--rounds 3]

Runs the same cases of the shipped tier-ci matrices (every case's kernel replaced by the
reference, which dumps every intermediate) through the worker's ``execute_case`` in this
process, rounds of ``off`` and ``always`` interleaved (the order alternating), goldens read
from one warm golden cache as a worker reads them.  Prints ms/case of each round, the median
of each mode and their ratio, and the load average before and after (the machine is shared).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import replace

from harness.casefiles.matrix import load_paths
from harness.devices import Device, backend
from harness.goldens.cache import GoldenCache
from harness.worker.execute import KernelLoader, execute_case

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cases(n: int):
    everything = [c for c in load_paths([os.path.join(ROOT, "cases")]) if c.tier == "ci"]
    step = max(1, len(everything) // n)
    return [replace(c, kernel="reference", env={}) for c in everything[::step][:n]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    chosen = cases(args.cases)
    device = Device("cpu")
    be, loader = backend(device), KernelLoader()
    print(f"load before: {os.getloadavg()}; {len(chosen)} cases: "
          f"{', '.join(sorted({c.op for c in chosen}))}")
    with tempfile.TemporaryDirectory() as root:
        cache = GoldenCache(root)
        for c in chosen:                       # warm: goldens in the cache, imports done
            execute_case(c, device, be, cache, loader, intermediates="always")
        times: dict[str, list[float]] = {"off": [], "always": []}
        for r in range(args.rounds):
            for mode in (("off", "always") if r % 2 == 0 else ("always", "off")):
                start = time.perf_counter()
                for c in chosen:
                    reply = execute_case(c, device, be, cache, loader, intermediates=mode)
                    assert reply.failure is None and reply.outcome.passed, (c.case_id, reply.summary)
                times[mode].append((time.perf_counter() - start) / len(chosen) * 1e3)
            print(f"round {r}: off {times['off'][-1]:.2f} ms/case, always {times['always'][-1]:.2f} ms/case")
    off, always = statistics.median(times["off"]), statistics.median(times["always"])
    print(f"median: off {off:.2f} ms/case, always {always:.2f} ms/case, ratio {always / off:.3f}")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
