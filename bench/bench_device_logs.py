"""What device log capture costs a case (harness/devicelogs; docs/ascend.md).

    python bench/bench_device_logs.py [--mb 10] [--files 4] [--others 2000] [--rounds 7]

A worker process's own log directory holding ``--mb`` MB of plog-shaped lines in ``--files``
files (the runtime rotates its files; each worker process has a directory of its own), and a
user's shared ``ASCEND_PROCESS_LOG_PATH`` holding the same plus ``--others`` files of other
processes (left out by their names before they cost a stat).  Per case the front end pays ``mark`` (a listing, no read); a failed case
also pays ``since`` (read what it appended, error lines first).  Timed side by side in rounds
(mark, then a failing case's mark + append + since, alternating), median and spread printed,
with the load average.  Goal (issue 27): nothing measurable on a passing case beside a case's
own cost (a tiny case is ~15 ms), <= 20 ms added to a failing one.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from harness import devicelogs

LINE = ("[INFO] RUNTIME(4242,python):2026-03-14-09:21:05.998.104 [runtime.cc:1403]4242 GetVisibleDevices: "
        "ASCEND_RT_VISIBLE_DEVICES=6, stream_id=3, task_id={i}\n")
FAULT = ("[ERROR] RUNTIME(4242,python):2026-03-14-09:21:07.512.334 [device_error_proc.cc:1057]4242 "
         "ProcessStarsCoreErrorInfo: The aicore execution is abnormal, device_id=6, stream_id=3, task_id=12\n"
         "[ERROR] ASCENDCL(4242,python):2026-03-14-09:21:07.513.002 [stream.cpp:112]4242 "
         "aclrtSynchronizeStreamWithTimeout: synchronize stream with timeout failed, runtime result = 507018\n")


def fill(directory: Path, mb: int, files: int, pid: int = 4242) -> list[Path]:
    per_file = mb * 1_000_000 // files
    paths = []
    for f in range(files):
        path = directory / "debug" / "plog" / f"plog-{pid}_2026031409{f:04d}000000.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        block = "".join(LINE.format(i=i) for i in range(per_file // len(LINE) + 1))[:per_file]
        path.write_text(block)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=10)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--others", type=int, default=2000, help="other processes' files in the shared directory")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cases", type=int, default=200, help="passing cases timed per round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        own = Path(tmp) / "own"
        shared = Path(tmp) / "shared"
        paths = fill(own, args.mb, args.files)
        shared_paths = fill(shared, args.mb, args.files)
        for other in range(args.others):
            fill(shared, 0, 1, pid=10_000 + other)
        print(f"load average before {os.getloadavg()[0]:.2f}")
        for name, directory, own_dir, files in (("own", own, True, paths), ("shared", shared, False, shared_paths)):
            passing, failing, read = [], [], []
            for _ in range(args.rounds):      # a passing case's cost, then a failing one's, alternating
                start = time.perf_counter()
                for _ in range(args.cases):
                    devicelogs.mark(directory, own_dir, {4242})
                passing.append((time.perf_counter() - start) / args.cases * 1e3)
                start = time.perf_counter()
                before = devicelogs.mark(directory, own_dir, {4242})
                with open(files[-1], "a") as fh:      # the failed case's lines: 200 of chatter and the fault
                    fh.write("".join(LINE.format(i=i) for i in range(200)) + FAULT)
                found = devicelogs.since(before, {4242})
                failing.append((time.perf_counter() - start) * 1e3)
                assert found is not None and "runtime result = 507018" in found.text
                read.append(found.bytes_read)
            load = os.getloadavg()
            print(f"{name} directory: {args.mb} MB in {args.files} files"
                  + (f" + {args.others} files of other processes" if not own_dir else "")
                  + f"; load average {load[0]:.2f} {load[1]:.2f}")
            print(f"  passing case (mark only): {fmt(passing)}")
            print(f"  failing case (mark + append + read what it added, {statistics.median(read):.0f} bytes): "
                  f"{fmt(failing)}")


def fmt(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3f} ms (min {min(xs):.3f}, max {max(xs):.3f})"

if __name__ == "__main__":
    main()
