"""``harness bisect --slower-than`` on a history in which one commit makes the kernel about 25%
slower: how often the first slow commit is named, how often a range that holds it is left
(UNSURE steps are skipped, never guessed), how often a wrong commit is named (the goal: never),
and the steps, rounds and wall time a bisect takes.

    python bench/bench_latency_bisect.py [--trials 3] [--commits 8] [--slow-from 5] [--slow-factor 1.31]

Each trial builds a fresh repository with ``tests/gitrepo.py`` ``make_latency_repo`` (a kernel
of ``--work`` loop steps a call before the reference attention, the loop ``--slow-factor``
times longer from ``--slow-from`` on: 1.31 makes the whole call about 25% slower, since the
loop is about four fifths of it) and runs the real CLI, one worker per ref, with
``--slower-than`` (default 10%) and the default rounds (up to ``MAX_ROUNDS``).  Printed per
trial: the verdict of each measured commit with its ratio and interval, the rounds each step took,
the noise carried between steps (docs/latency.md), the answer, the wall time and the load average
before and after; at the end the mean rounds per step.  No figure here is asserted anywhere: the e2e
tests (tests/e2e/test_latency_bisect_cli.py) use a larger slowdown so that they never flake.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from gitrepo import latency_case_yaml, make_latency_repo  # noqa: E402


def one_bisect(work: Path, args: argparse.Namespace, goldens: Path) -> dict:
    shas = make_latency_repo(work / "repo", n_commits=args.commits, slow_from=args.slow_from, work=args.work,
                             slow_factor=args.slow_factor)
    (work / "case.yaml").write_text(latency_case_yaml(budget_s=args.budget))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "harness", "bisect", str(work / "case.yaml"), "--repo",
                           str(work / "repo"), "--good", shas[0], "--bad", shas[-1], "--slower-than", args.slower_than,
                           "--worktree-cache", str(work / "wt"), "--golden-cache", str(goldens),
                           "--store", str(work / "r.sqlite"), "--log-dir", str(work / "logs"),
                           "--json", str(work / "b.json"), "--no-progress"],
                          cwd=work, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    try:
        doc = json.loads((work / "b.json").read_text())["slower_than"]
    except (OSError, ValueError, KeyError):
        print(proc.stdout[-2000:], proc.stderr[-2000:])
        raise SystemExit(f"bisect wrote no result (exit {proc.returncode})")
    culprit = shas[args.slow_from]
    if doc["first_slow"] is None and not doc["candidates"]:     # the bad end was not measured slower
        answer = f"no answer ({doc.get('why') or 'no reason given'})"
        answer = answer.replace(shas[-1][:12], "the bad end")
    elif doc["first_slow"] is None:
        answer = "range holding the culprit" if culprit in doc["candidates"] else "range WITHOUT the culprit"
    else:
        answer = "named the culprit" if doc["first_slow"] == culprit else "named a WRONG commit"
    steps = [line for line in (proc.stdout + proc.stderr).splitlines() if line.lstrip().startswith("step: ")]
    rounds = [max((row["latency_verdict"].get("rounds", 0) for row in step["latency"]), default=0)
              for step in doc["steps"]]
    carried = [line for line in proc.stdout.splitlines() if line.startswith("noise carried between steps: ")]
    return {"answer": answer, "steps": steps, "wall": wall, "load": (load, os.getloadavg()[0]),
            "measured": len(doc["steps"]), "rounds": rounds, "carried": carried}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--commits", type=int, default=8)
    parser.add_argument("--slow-from", type=int, default=5)
    parser.add_argument("--slow-factor", type=float, default=1.31)
    parser.add_argument("--work", type=int, default=30_000)
    parser.add_argument("--budget", type=float, default=0.1, help="seconds of samples per side per round")
    parser.add_argument("--slower-than", default="10%")
    args = parser.parse_args()
    print(f"{args.commits} commits, the loop x{args.slow_factor} from commit {args.slow_from}, "
          f"--slower-than {args.slower_than}, {args.budget} s of samples per side per round")
    answers: dict[str, int] = {}
    rounds: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        goldens = Path(tmp) / "goldens"
        for trial in range(args.trials):
            work = Path(tmp) / f"trial{trial}"
            work.mkdir()
            found = one_bisect(work, args, goldens)
            answers[found["answer"]] = answers.get(found["answer"], 0) + 1
            rounds += found["rounds"]
            print(f"trial {trial + 1}: {found['answer']}, {found['measured']} commits measured, "
                  f"rounds per step {found['rounds']} ({sum(found['rounds'])} in all), "
                  f"{found['wall']:.0f} s, load {found['load'][0]:.1f} -> {found['load'][1]:.1f}")
            for line in found["steps"] + found["carried"]:
                print("   ", line.strip()[:240])
    print("answers:", ", ".join(f"{n} {answer}" for answer, n in sorted(answers.items())))
    if rounds:
        print(f"rounds per step: mean {sum(rounds) / len(rounds):.1f} over {len(rounds)} steps, "
              f"{sum(rounds) / args.trials:.1f} a bisect")


if __name__ == "__main__":
    main()
