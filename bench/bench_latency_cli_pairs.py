"""Latency verdicts through the real path: ``harness compare --latency`` (the harness's own workers,
new for every ref in every round) on a generated kernel library, again and again.

    python bench/bench_latency_cli_pairs.py [--trials 20] [--slow-factor 1.3] [--dir DIR]

One repository (``tests/gitrepo.py`` ``make_latency_repo``: commits 1 and 2 hold the same kernel,
commit 3 does ``--slow-factor`` times its loop), then per trial one compare of three refs,
``upstream`` (commit 1), ``twin`` (commit 2: identical code) and ``pr`` (commit 3), up to 40 rounds
(the compare goes on while either candidate is UNSURE), 0.1 s of samples a ref and round.  Each
trial prints the two verdicts (twin and pr against upstream) with their ratio, interval and rounds;
the end, the counts.  Several can run at once (different ``--dir``) to load the machine.  The
companion of ``bench_latency_pairs.py`` (plain processes, hundreds of pairs): this one is the
harness's whole path, fewer pairs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from gitrepo import latency_case_yaml, make_latency_repo  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--slow-factor", type=float, default=1.3, help="pr's loop over upstream's (default 1.3)")
    ap.add_argument("--work", type=int, default=30_000)
    ap.add_argument("--budget", type=float, default=0.1, help="seconds of samples a ref and round")
    ap.add_argument("--dir", default=None, help="where the repository and stores go (default: a temporary one)")
    args = ap.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="latency-cli-pairs-"))
    base.mkdir(parents=True, exist_ok=True)
    shas = make_latency_repo(base / "repo", n_commits=4, slow_from=3, work=args.work, slow_factor=args.slow_factor)
    (base / "case.yaml").write_text(latency_case_yaml(budget_s=args.budget))
    print(f"start {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {os.getloadavg()[0]:.2f}, in {base}",
          flush=True)
    seen: dict[str, Counter] = {"twin": Counter(), "pr": Counter()}
    for t in range(args.trials):
        out = base / f"c{t}.json"
        began = time.time()
        proc = subprocess.run([sys.executable, "-m", "harness", "compare", str(base / "case.yaml"), "--repo",
                               str(base / "repo"), "--latency", "--latency-rounds", "40", "--worktree-cache",
                               str(base / "wt"), "--golden-cache", str(base / "gc"), "--store", str(base / f"r{t}.sqlite"),
                               "--log-dir", str(base / f"logs{t}"), "--json", str(out), "--no-progress",
                               "--ref", f"upstream={shas[1]}", "--ref", f"twin={shas[2]}", "--ref", f"pr={shas[3]}"],
                              capture_output=True, text=True, cwd=base, timeout=1800)
        if not out.exists():
            print(f"{t}: no document (exit {proc.returncode}): {proc.stderr[-500:]}", flush=True)
            continue
        rows = {r["candidate"]: r["latency_verdict"] for r in json.loads(out.read_text())["latency"]}
        for name, v in rows.items():
            seen[name][v.get("verdict", "error")] += 1
        shown = {name: f"{v.get('verdict')} {v.get('ratio', 0):.3f} [{v.get('ci_low', 0):.3f}, {v.get('ci_high', 0):.3f}] "
                       f"{v.get('rounds')} rounds" for name, v in rows.items()}
        print(f"{t}: {time.time() - began:.0f} s, load {os.getloadavg()[0]:.2f}: {shown}", flush=True)
    print(f"end {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {os.getloadavg()[0]:.2f}; "
          f"twin (identical): {dict(seen['twin'])}; pr ({args.slow_factor}x the loop): {dict(seen['pr'])}", flush=True)


if __name__ == "__main__":
    main()
