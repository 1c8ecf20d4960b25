"""A deterministic regression in a real history: `harness bisect` against `git bisect run`.

    python bench/bench_bisect_history.py [--commits 40] [--culprits 7,19,31]

No kernels: the generated pure-Python library of tests/pylib_repo.py (a pytest suite; one commit
breaks ``slugify``, the tracked test fails from there on, every run), ``--commits`` commits long.
For each culprit position, the same test is bisected twice, aimed at the tracked test
(``--test '*test_slugify_stateless*'``):

  harness   harness bisect --good <first> --bad main: its runs ("after N runs") and the answer
  stated    the same with --p-prior 1 (the user says the failure is deterministic: 10 runs' weight)
  git       git bisect run harness bisect-run (one run per step): git's steps and answer

Goal: harness's runs at most
1.6x git's, the right commit. Prints the load average (the box is shared).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from gitrepo import git_env  # noqa: E402
from pylib_repo import make_pylib_repo, suite_case  # noqa: E402

TEST = "*test_slugify_stateless*"


def harness(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=1800, env={**os.environ, **(env or {})})


def harness_bisect(repo, cases: Path, work: Path, *extra: str) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    proc = harness("bisect", str(cases), "--repo", str(repo.path), "--good", repo.shas[0], "--bad", "main",
                   "--test", TEST, "--worktree-cache", str(work / "wt"), "--no-store", "--no-progress", *extra,
                   cwd=work)
    wall = time.perf_counter() - t0
    runs = re.search(r"after (\d+) runs", proc.stdout)
    found = re.search(r"first bad commit: ([0-9a-f]{40})", proc.stdout)
    if not (runs and found):
        raise SystemExit(f"harness bisect did not conclude:\n{proc.stdout}\n{proc.stderr}")
    return int(runs.group(1)), found.group(1), wall


def git_bisect(repo, cases: Path, work: Path) -> tuple[int, str, float]:
    env = {**git_env(), "XDG_CACHE_HOME": str(work / "xdg")}
    git = lambda *a: subprocess.run(["git", *a], cwd=repo.path, env=env, capture_output=True, text=True,
                                    timeout=1800)
    git("bisect", "start", "main", repo.shas[0])
    t0 = time.perf_counter()
    try:
        proc = git("bisect", "run", sys.executable, "-m", "harness", "bisect-run", str(cases), "--no-progress",
                   "--test", TEST)
    finally:
        wall = time.perf_counter() - t0
        git("bisect", "reset")
    out = proc.stdout + proc.stderr
    found = re.search(r"([0-9a-f]{40}) is the first bad commit", out)
    if not found:
        raise SystemExit(f"git bisect run did not conclude:\n{out}")
    return out.count("harness bisect-run: run ") or out.count("running "), found.group(1), wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=40, help="commits in the history (default 40)")
    parser.add_argument("--culprits", default="7,19,31", help="culprit positions, comma-separated")
    args = parser.parse_args()
    culprits = [int(c) for c in args.culprits.split(",")]
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; {args.commits} commits "
          f"({args.commits - 2} between good and bad), a deterministic regression")
    print(f"{'culprit':>7}  {'harness runs':>12} {'right':>5} {'wall s':>6}  {'stated runs':>11} {'right':>5}  "
          f"{'git runs':>8} {'right':>5} {'wall s':>6}  ratio  stated ratio")
    ratios, stated_ratios = [], []
    for culprit in culprits:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            repo = make_pylib_repo(work / "textkit", commits=args.commits, other=args.commits - 1, culprit=culprit)
            cases = suite_case(work / "cases")
            h_runs, h_sha, h_wall = harness_bisect(repo, cases, work)
            s_runs, s_sha, _ = harness_bisect(repo, cases, work, "--p-prior", "1")
            g_runs, g_sha, g_wall = git_bisect(repo, cases, work)
            ratio = h_runs / g_runs
            ratios.append(ratio)
            stated_ratios.append(s_runs / g_runs)
            print(f"{culprit:>7}  {h_runs:>12} {str(h_sha == repo.culprit):>5} {h_wall:>6.0f}  {s_runs:>11} "
                  f"{str(s_sha == repo.culprit):>5}  {g_runs:>8} {str(g_sha == repo.culprit):>5} {g_wall:>6.0f}  "
                  f"{ratio:.2f}x  {s_runs / g_runs:.2f}x", flush=True)
    mean = sum(ratios) / len(ratios)
    stated = sum(stated_ratios) / len(stated_ratios)
    print(f"mean ratio {mean:.2f}x (goal <= 1.6x): {'ok' if mean <= 1.6 else 'MISSED'}; with --p-prior 1 "
          f"{stated:.2f}x; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0 if mean <= 1.6 else 1


if __name__ == "__main__":
    raise SystemExit(main())
