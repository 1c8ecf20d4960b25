"""What a command case costs beyond the command: the harness beside a shell loop, and JUnit reading.

Three figures, measured side by side in one process (docs/benchmarks.md, "Command cases"):

1. per case, a short command (``true``, list form): N cases through ``execute`` (spawn in a
   session of its own, capture, judge, store in SQLite, report document) against the same
   command run N times by ``sh -c 'for ...; do true; done'``; rounds interleaved; the
   overhead per case is the difference over N;
2. the same with a 1 s command (``sleep 1``): the ratio harness / shell loop;
3. reading a 20-test pytest JUnit file and judging each test (``read_junit`` plus the
   classifier on every failure, a third of them printing 507018), per run of the suite:
   what a 5 x 2-ref compare of the suite does 10 times.

    .venv/bin/python bench/bench_commands.py [--cases 20] [--slow-cases 3] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from harness.casefiles import load_matrix
from harness.classify.rules import builtin_rules
from harness.commands.junit import read_junit
from harness.commands.runner import _test_verdict
from harness.devices import Device
from harness.run.engine import Planned, RunOptions
from harness.run.spawn import WorkerOptions
from harness.run.session import execute
from harness.store import Store


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _cases(folder: Path, command: str, n: int):
    path = folder / "bench.yaml"
    path.write_text(f"name: bench\ncommand: {command}\nmatrix: {{i: [{', '.join(map(str, range(n)))}]}}\n")
    return load_matrix(path)


def harness_time(cases, tmp: Path, tag: str) -> float:
    options = RunOptions(devices=[Device("cpu")], worker=WorkerOptions(log_dir=tmp / f"logs-{tag}"))
    with Store(tmp / f"{tag}.sqlite") as store:
        start = time.perf_counter()
        recorded = execute([Planned(i, c) for i, c in enumerate(cases)], options, store, publish=lambda doc: doc)
        took = time.perf_counter() - start
    assert all(r.outcome.passed for r in recorded.results), [r.summary for r in recorded.results]
    return took


def shell_time(body: str, n: int) -> float:
    start = time.perf_counter()
    subprocess.run(["/bin/sh", "-c", f"for i in $(seq {n}); do {body}; done"], check=True)
    return time.perf_counter() - start


JUNIT_CASE = ('<testcase classname="tests.test_qwen3_serving" name="test_{i}" time="0.5">{body}</testcase>\n')
FAILURE = ('<failure message="RuntimeError: ACL stream synchronize failed, error code is 507018">'
           + "def test():\n&gt;   engine.decode(batch)\n" + "E   frame line\n" * 40
           + "E   RuntimeError: ACL stream synchronize failed, error code is 507018</failure>"
           + "<system-err>" + "[INFO] step ok\n" * 200 + "E39999: Inner Error! error code is 507018</system-err>")


def junit_file(tmp: Path) -> Path:
    cases = "".join(JUNIT_CASE.format(i=i, body=FAILURE if i % 3 == 0 else "") for i in range(20))
    path = tmp / "junit.xml"
    path.write_text(f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="20">'
                    f"\n{cases}</testsuite></testsuites>\n")
    (tmp / "tests").mkdir(exist_ok=True)
    (tmp / "tests" / "test_qwen3_serving.py").write_text("")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20, help="short-command cases per round")
    parser.add_argument("--slow-cases", type=int, default=3, help="1 s cases per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}; {os.cpu_count()} cpus; before: {_load()}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        short = _cases(tmp, '["true"]', args.cases)
        slow_dir = tmp / "slow"
        slow_dir.mkdir()
        slow = _cases(slow_dir, '["sleep", "1"]', args.slow_cases)
        harness_time(short[:2], tmp, "warm")                    # imports, the store's schema
        per_case, ratios = [], []
        for r in range(args.rounds):
            h = harness_time(short, tmp, f"short{r}")
            s = shell_time("true", args.cases)
            per_case.append((h - s) / args.cases)
            print(f"round {r}: {args.cases} x true: harness {h * 1000:.0f} ms, shell loop {s * 1000:.0f} ms, "
                  f"overhead {per_case[-1] * 1000:.1f} ms/case; {_load()}")
            s1 = shell_time("sleep 1", args.slow_cases)
            h1 = harness_time(slow, tmp, f"slow{r}")
            ratios.append(h1 / s1)
            print(f"round {r}: {args.slow_cases} x sleep 1: harness {h1:.3f} s, shell loop {s1:.3f} s, "
                  f"ratio {ratios[-1]:.3f}x; {_load()}")
        print(f"overhead per short case: median {statistics.median(per_case) * 1000:.1f} ms "
              f"(goal <= 30 ms); 1 s command: median {statistics.median(ratios):.3f}x (goal <= 1.1x)")

        path = junit_file(tmp)
        builtin_rules()                                          # a run loads them once, before any case
        times = []
        for _ in range(10):                                      # a 5 x 2-ref compare reads it 10 times
            start = time.perf_counter()
            tests = read_junit(path, tmp)
            verdicts = [_test_verdict(t, None) for t in tests]
            times.append(time.perf_counter() - start)
        labels = sorted({v.outcome.value for v in verdicts})
        print(f"JUnit of {len(tests)} tests ({path.stat().st_size} bytes; {', '.join(labels)}): read and judged in "
              f"median {statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms per run "
              f"(goal <= 50 ms); {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
