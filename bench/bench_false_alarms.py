"""False alarms of independent correct kernels on the shipped ci matrices.

    python bench/bench_false_alarms.py [--seeds 0-3] [--kernels exact_round_once,...] [--matrices prefill,...]
                                       [--rule current|widen|either|interval] [--json out.json]

Each outside kernel (tests/outside_kernels/outside/<kernel>.py) runs every case of each
ci-tier matrix in cases/*.yaml whose op it implements, with the case's seed replaced by
each of --seeds (matrix cases and includes alike; duplicates after the replacement are
run once).  Cases go through ``harness.worker.execute.execute_case`` in this process:
the same inputs -> golden (cached) -> kernel import -> launch -> checks path a device
worker runs, without the worker processes and pipes (about 20x faster on the CPU than
``harness run``, which matters on a shared 2-core box).

Prints a table kernel x matrix -> cases, false alarms (outcomes other than PASS and
NEAR_TIE), the worst case (most bad elements over allowed).  ``wrong_gqa`` is a known
bug: its "false alarms" column is its detections and should equal its cases.

``--rule`` (default: whatever harness/worker/checks.py does) picks the acceptance rule
by setting ``HARNESS_ACCEPT_RULE``, read by checks.py (see docs/contracts.md, "Rounding
spread"): ``current`` = the golden rounded as stored only; ``widen`` = bound widened by
|g_exact - g_rounded|; ``either`` = an element is good when close to either golden;
``interval`` = distance to the interval [g_rounded, g_exact].
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = ROOT / "tests" / "outside_kernels"
KERNELS = ("exact_round_once", "bf16_intermediate", "torch_sdpa", "torch_flex", "transformers_qwen3", "wrong_gqa")
PASSING = ("PASS", "NEAR_TIE")


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            seeds.extend(range(int(lo), int(hi) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-15", help="e.g. 0-15 or 0,3,7 (default 0-15)")
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--matrices", default="", help="matrix names to keep (default: every ci matrix)")
    parser.add_argument("--rule", default=None, choices=("current", "widen", "either", "interval"))
    parser.add_argument("--json", default=None, help="write every case's outcome and comparison counts here")
    parser.add_argument("--show", type=int, default=0, help="print the summary of up to N failing cases per cell")
    args = parser.parse_args(argv)
    if args.rule:
        os.environ["HARNESS_ACCEPT_RULE"] = args.rule
    sys.path.insert(0, str(OUTSIDE))
    warnings.filterwarnings("ignore")

    import importlib

    import torch

    from harness.casefiles.matrix import load_paths
    from harness.devices import Device, backend
    from harness.goldens.cache import GoldenCache
    from harness.worker.execute import KernelLoader, execute_case

    torch.set_num_threads(1)
    seeds = parse_seeds(args.seeds)
    kernels = [k for k in args.kernels.split(",") if k]
    wanted = {m for m in args.matrices.split(",") if m}
    cases = [c for c in load_paths([ROOT / "cases"]) if c.tier == "ci" and (not wanted or c.matrix in wanted)]
    implemented = {k: importlib.import_module(f"outside.{k}") for k in kernels}

    device = Device("cpu")
    be, loader = backend(device), KernelLoader()
    rows: dict[tuple[str, str], dict] = defaultdict(lambda: {"cases": 0, "alarms": 0, "worst": None,
                                                            "worst_excess": -1, "outcomes": defaultdict(int),
                                                            "failing": []})
    records = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        golden_cache = GoldenCache(Path(tmp))
        seen = set()
        for base in cases:
            for seed in seeds:
                case = replace(base, seed=seed)
                key = (base.matrix, base.case_id.split("[", 1)[1].rsplit(",seed=", 1)[0], seed)
                for kernel in kernels:
                    if not hasattr(implemented[kernel], base.op):
                        continue
                    if (kernel,) + key in seen:
                        continue
                    seen.add((kernel,) + key)
                    kcase = replace(case, kernel=f"outside.{kernel}:{base.op}",
                                    case_id=f"{base.case_id}@seed{seed}")
                    payload = execute_case(kcase, device, be, golden_cache, loader)
                    outcome = payload.get("outcome") or f"EXC:{payload.get('stage')}:{payload.get('exc_type')}"
                    row = rows[(kernel, base.matrix)]
                    row["cases"] += 1
                    row["outcomes"][outcome] += 1
                    compare = (payload.get("metrics") or {}).get("compare", {})
                    excess = max((c.get("bad_count", 0) - c.get("allowed_bad", 0)
                                  for c in compare.values() if "bad_count" in c), default=0)
                    if outcome not in PASSING:
                        row["alarms"] += 1
                        row["failing"].append(f"{kcase.case_id}: {payload.get('summary') or payload.get('message')}")
                        if excess > row["worst_excess"]:
                            row["worst_excess"], row["worst"] = excess, f"{kcase.case_id}: {payload.get('summary')}"
                    records.append({"kernel": kernel, "matrix": base.matrix, "case": kcase.case_id,
                                    "outcome": outcome, "summary": payload.get("summary") or payload.get("message"),
                                    "compare": {n: {k: c.get(k) for k in ("bad_count", "allowed_bad", "numel",
                                                                          "max_abs_error")}
                                                for n, c in compare.items()}})
    elapsed = time.perf_counter() - t0

    rule = os.environ.get("HARNESS_ACCEPT_RULE", "(checks.py default)")
    print(f"seeds {args.seeds}, rule {rule}, {len(records)} case runs in {elapsed:.0f} s")
    print(f"{'kernel':20} {'matrix':14} {'cases':>5} {'alarms':>6}  worst case (bad - allowed)")
    for (kernel, matrix), row in sorted(rows.items(), key=lambda kv: (kernels.index(kv[0][0]), kv[0][1])):
        worst = f"{row['worst_excess']:+d} {row['worst']}" if row["worst"] else "-"
        print(f"{kernel:20} {matrix:14} {row['cases']:5d} {row['alarms']:6d}  {worst[:150]}")
        for line in row["failing"][:args.show]:
            print(f"{'':42}{line[:160]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"seeds": seeds, "rule": rule, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
