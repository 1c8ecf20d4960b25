"""False alarms of independent correct kernels on the shipped ci matrices.

    python bench/bench_false_alarms.py [--seeds 0-3] [--kernels exact_round_once,...] [--matrices prefill,...]
                                       [--rule widen|current|either|interval] [--json out.json]
    python bench/bench_false_alarms.py --widening [--seeds 0-3]     # how much the rule widens the bound
    python bench/bench_false_alarms.py --compare widen.json current.json ...   # rules side by side

Each outside kernel (tests/outside_kernels/outside/<kernel>.py) runs every case of each
ci-tier matrix in cases/*.yaml whose op it implements, with the case's seed replaced by
each of --seeds (matrix cases and includes alike; duplicates after the replacement are
run once).  Cases go through ``harness.worker.execute.execute_case`` in this process:
the same inputs -> golden (cached) -> kernel import -> launch -> checks path a device
worker runs, without the worker processes and pipes (about 20x faster on the CPU than
``harness run``, which matters on a shared 2-core box).

Prints a table kernel x matrix -> cases, false alarms (outcomes other than PASS and
NEAR_TIE), the worst case (most bad elements over allowed).  Known bugs (``wrong_gqa``,
and any builtin mutant named in --kernels, e.g. skip_rope, stale_kv) are marked BUG: for
them the column counts detections, and the cases they pass are listed with the reason.

``--rule`` sets ``harness.worker.checks.ACCEPT_RULE`` in this process (see
docs/contracts.md, "Rounding spread"): ``widen`` (the default there) widens each
element's bound by |g_exact - g_rounded|; ``current`` ignores g_exact (the check before
the rule); ``either`` accepts an element within tolerance of either golden;
``interval`` widens only on g_exact's side of g_rounded.

``--compare`` reads --json files of runs under different rules and prints, per kernel and
matrix, the false alarms (detections for bugs) of each, and the margin: for correct
kernels the worst bad/allowed over their cases (< 1 passes), for bugs the smallest
bad/allowed over the cases they fail under the first file's rule (the closest a bug came
to escaping).

``--widening`` runs no kernel: for every case it computes both goldens and prints, per
op and output, the median and max over compared elements of new bound / old bound,
``(atol + rtol*|g| + |g_exact - g|) / (atol + rtol*|g|)``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = ROOT / "tests" / "outside_kernels"
KERNELS = ("exact_round_once", "bf16_intermediate", "kv_from_cache", "bf16_probs", "torch_sdpa", "torch_sdpa_bf16", "torch_flex",
           "transformers_qwen3", "wrong_gqa", "missed_first_key", "unweighted_k_norm")
BUGS = ("wrong_gqa", "missed_first_key", "unweighted_k_norm")


def is_bug(kernel: str) -> bool:
    """An outside bug, or a builtin mutant (the shipped reference, triton and adapted kernels are correct)."""
    from harness.ops.registry import BUILTINS
    return kernel in BUGS or any(".mutants." in target for target in BUILTINS.get(kernel, {}).values())
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
    parser.add_argument("--rule", default=None, choices=("widen", "current", "either", "interval"))
    parser.add_argument("--widening", action="store_true", help="print how much the rule widens the bound")
    parser.add_argument("--compare", nargs="+", metavar="JSON", help="compare --json files of several rules")
    parser.add_argument("--json", default=None, help="write every case's outcome and comparison counts here")
    parser.add_argument("--show", type=int, default=0, help="print the summary of up to N failing cases per cell")
    args = parser.parse_args(argv)
    if args.compare:
        return compare_rules(args.compare)
    sys.path.insert(0, str(OUTSIDE))
    os.environ["RACY_HEAD_P"] = "1"          # the racy_head mutant tears a head on every launch
    warnings.filterwarnings("ignore")

    import importlib

    import torch

    from harness.casefiles import load_paths
    from harness.devices import Device, backend
    from harness.goldens.cache import GoldenCache
    from harness.ops.registry import BUILTINS
    from harness.worker import checks
    from harness.worker.execute import KernelLoader, execute_case

    if args.rule:
        checks.ACCEPT_RULE = args.rule
    torch.set_num_threads(1)
    seeds = parse_seeds(args.seeds)
    kernels = [k for k in args.kernels.split(",") if k]
    wanted = {m for m in args.matrices.split(",") if m}
    cases = [c for c in load_paths([ROOT / "cases"]) if c.tier == "ci" and (not wanted or c.matrix in wanted)]
    if args.widening:
        return widening(cases, seeds)
    bugs = {k for k in kernels if is_bug(k)}

    def target(kernel: str, op: str) -> str | None:
        if kernel in BUILTINS:
            return kernel if op in BUILTINS[kernel] else None
        module = importlib.import_module(f"outside.{kernel}")
        return f"outside.{kernel}:{op}" if hasattr(module, op) else None

    device = Device("cpu")
    be, loader = backend(device), KernelLoader()
    rows: dict[tuple[str, str], dict] = defaultdict(lambda: {"cases": 0, "alarms": 0, "worst": None,
                                                            "worst_excess": -1, "outcomes": defaultdict(int),
                                                            "failing": [], "passing": []})
    records = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        golden_cache = GoldenCache(Path(tmp))
        seen = set()
        for base in cases:
            for seed in seeds:
                case = replace(base, seed=seed)
                plain = re.sub(r",seed=\d+\]$", "]", re.sub(r"\[seed=\d+\]$", "", base.case_id))
                for kernel in kernels:
                    kernel_name = target(kernel, base.op)
                    if kernel_name is None or (kernel, plain, seed) in seen:
                        continue
                    seen.add((kernel, plain, seed))
                    kcase = replace(case, kernel=kernel_name, case_id=f"{plain}@seed{seed}")
                    reply = execute_case(kcase, device, be, golden_cache, loader)
                    payload = reply.to_wire()
                    failure = reply.failure
                    outcome = reply.outcome.value if failure is None else f"EXC:{failure.stage.value}:{failure.exc_type}"
                    row = rows[(kernel, base.matrix)]
                    row["cases"] += 1
                    row["outcomes"][outcome] += 1
                    compare = (payload.get("metrics") or {}).get("compare", {})
                    excess = max((c.get("bad_count", 0) - c.get("allowed_bad", 0)
                                  for c in compare.values() if "bad_count" in c), default=0)
                    if outcome not in PASSING:
                        row["alarms"] += 1
                        row["failing"].append(f"{kcase.case_id}: {payload.get('summary') or (failure and failure.message)}")
                        if excess > row["worst_excess"]:
                            row["worst_excess"], row["worst"] = excess, f"{kcase.case_id}: {payload.get('summary')}"
                    else:
                        row["passing"].append(f"{kcase.case_id}: {outcome} ({_skipped(compare)})")
                    records.append({"kernel": kernel, "matrix": base.matrix, "case": kcase.case_id,
                                    "outcome": outcome, "summary": payload.get("summary") or (failure and failure.message),
                                    "compare": {n: {k: c.get(k) for k in ("bad_count", "allowed_bad", "numel",
                                                                          "max_abs_error")}
                                                for n, c in compare.items()}})
    elapsed = time.perf_counter() - t0

    rule = checks.ACCEPT_RULE
    print(f"seeds {args.seeds}, rule {rule}, {len(records)} case runs in {elapsed:.0f} s")
    print(f"{'kernel':24} {'matrix':14} {'cases':>5} {'alarms':>6}  worst case (bad - allowed)")
    for (kernel, matrix), row in sorted(rows.items(), key=lambda kv: (kernels.index(kv[0][0]), kv[0][1])):
        worst = f"{row['worst_excess']:+d} {row['worst']}" if row["worst"] else "-"
        label = f"{kernel} (BUG)" if kernel in bugs else kernel
        print(f"{label:24} {matrix:14} {row['cases']:5d} {row['alarms']:6d}  {worst[:150]}")
        for line in row["failing"][:args.show]:
            print(f"{'':46}{line[:160]}")
        if kernel in bugs and row["passing"]:
            print(f"{'':46}not detected: {len(row['passing'])}"
                  f" (compared nothing: {sum('every row has slot < 0' in p for p in row['passing'])})")
            for line in row["passing"][:args.show]:
                print(f"{'':46}  {line[:160]}")
    if args.json:
        Path(args.json).write_text(json.dumps({"seeds": seeds, "rule": rule, "records": records}, indent=1))
    return 0


def compare_rules(paths: list[str]) -> int:
    docs = [json.loads(Path(p).read_text()) for p in paths]
    rules = [d["rule"] for d in docs]
    by_rule = [{(r["kernel"], r["matrix"], r["case"]): r for r in d["records"]} for d in docs]
    bugs = {r["kernel"] for d in docs for r in d["records"] if is_bug(r["kernel"])}

    def ratio(rec: dict) -> float:
        worst = 0.0
        for c in rec["compare"].values():
            if c.get("bad_count") is not None:
                worst = max(worst, c["bad_count"] / max(c["allowed_bad"], 1))
        return worst

    groups = sorted({(k, m) for k, m, _ in by_rule[0]}, key=lambda km: (km[0] in bugs, km))
    print("alarms (detections for bugs) and margin per rule; margin: correct kernels worst bad/allowed, "
          "bugs least bad/allowed over cases detected under " + rules[0])
    print(f"{'kernel':24} {'matrix':14} {'cases':>5} " + " ".join(f"{r:>17}" for r in rules))
    for kernel, matrix in groups:
        keys = [k for k in by_rule[0] if k[:2] == (kernel, matrix)]
        cells = []
        detected_first = [k for k in keys if by_rule[0][k]["outcome"] not in PASSING]
        for recs in by_rule:
            alarms = sum(recs[k]["outcome"] not in PASSING for k in keys if k in recs)
            if kernel in bugs:
                vals = [ratio(recs[k]) for k in detected_first if k in recs]
                margin = min(vals) if vals else float("nan")
            else:
                margin = max((ratio(recs[k]) for k in keys if k in recs), default=0.0)
            cells.append(f"{alarms:5d} {margin:10.2f}")
        label = f"{kernel} (BUG)" if kernel in bugs else kernel
        print(f"{label:24} {matrix:14} {len(keys):5d} " + " ".join(f"{c:>17}" for c in cells))
    return 0


def _skipped(compare: dict) -> str:
    """Why a case passed: outputs that were not compared, else 'every output within tolerance'."""
    skipped = [f"{name}: {c['skipped']}" for name, c in compare.items() if "skipped" in c]
    return "; ".join(skipped) or "every output within tolerance"


def widening(cases, seeds) -> int:
    """Median and max over compared elements of new bound / old bound, per op and output."""
    import torch

    from harness import goldens
    from harness.worker import inputs

    ratios: dict[tuple[str, str], list[torch.Tensor]] = defaultdict(list)
    seen = set()
    for base in cases:
        if not goldens.exact_names(base.op):
            continue
        for seed in seeds:
            case = replace(base, seed=seed)
            ci = inputs.generate(case)
            if (base.op, json.dumps(ci.spec, sort_keys=True)) in seen:
                continue
            seen.add((base.op, json.dumps(ci.spec, sort_keys=True)))
            g = goldens.compute(base.op, ci.args, exact=True)
            for name in goldens.output_names(base.op):
                exact = g.get(name + goldens.EXACT_SUFFIX)
                if exact is None:
                    continue
                expected = g[name]
                keep = ci.slots >= 0
                if name in ci.op.slot_masked_outputs or (name in ("k_cache", "v_cache") and expected.dim() == 3):
                    expected, exact = expected[keep], exact[keep]         # rows with slot < 0: not compared
                elif name in ("k_cache", "v_cache"):                      # decode_layers: [L, B, Hkv, D]
                    expected, exact = expected[:, keep], exact[:, keep]
                tol = case.tolerance_for(name)
                old = tol.atol + tol.rtol * expected.abs()
                ratios[(base.op, name)].append(((old + (exact - expected).abs()) / old).flatten())
    print(f"bound widening, new / old = (atol + rtol*|g| + |g_exact - g|) / (atol + rtol*|g|), seeds {seeds}")
    print(f"{'op':28} {'output':12} {'elements':>9} {'median':>8} {'p99':>8} {'max':>8}  share > 1.01")
    for (op, name), parts in ratios.items():
        r = torch.cat(parts).double()
        if not r.numel():
            continue
        print(f"{op:28} {name:12} {r.numel():9d} {r.median().item():8.4f} {r.quantile(0.99).item():8.4f} "
              f"{r.max().item():8.3f}  {(r > 1.01).double().mean().item():.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
