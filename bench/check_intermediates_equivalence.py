"""Record every intermediate comparison of a set of cases, to show a change to the comparison
leaves its results as they were (bench/bench_intermediates.py's speed-ups, issue 24).

    python bench/check_intermediates_equivalence.py OUT.json [--against BEFORE.json] [--cases N]

Runs the shipped tier-ci matrices (cases/*.yaml) through the worker's ``execute_case`` in this
process with ``--intermediates always``, once with the reference kernel and once with every
shipped mutant (and adapted kernel) that implements the case's op, on one torch thread, goldens
from one golden cache.  Writes, per case and kernel, the outcome, summary, report and metrics
(every output's ``ratio_allclose`` comparison and the table of intermediates with each one's
verdict, metrics and localisation), without what the clock or the checkout decides.  With ``--against`` it
compares the new record with an earlier one and exits 1 on any difference, naming the first
few.  Floats are written as ``repr`` writes them: equal files mean equal bits.

The mutants that crash, hang or exhaust memory by design (segfault, hang, abort, oom, ...) are
not run: this process is the worker; nor is ``reduction_order``, whose last bits come from the
OS's random source on purpose.  ``racy_head`` draws from a fixed seed (``RACY_HEAD_SEED``).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
from dataclasses import replace
from typing import Any

import torch

from harness.casefiles import load_paths
from harness.devices import Device, backend
from harness.goldens.cache import GoldenCache
from harness.ops.registry import BUILTINS
from harness.worker.execute import KernelLoader, execute_case

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Builtins that compute (the others crash, hang or fill memory on purpose), and the mutant
# modules ``harness audit`` uses that hold one function per op.
KERNELS = ("reference", "torch-sdpa", "torch-flex", "unguarded_slot_write", "returns_query", "skip_rope",
           "stale_kv", "racy_head")
MODULES = ("harness.kernels.mutants.gptj_rope", "harness.kernels.mutants.off_by_one_page",
           "harness.kernels.mutants.key_bounds")
# metrics the clock, the machine or the checkout decide (the kernel's git commit): left out of
# the record, and out of an older record when one is compared
LEFT_OUT = ("timings", "duration_s", "stage_s", "seconds", "latency", "hygiene", "memory", "git")


def kernels_for(op: str) -> list[str]:
    chosen = [k for k in KERNELS if op in BUILTINS[k]]
    chosen += [m for m in MODULES if hasattr(importlib.import_module(m), op)]
    return chosen


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items() if k not in LEFT_OUT}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def record(limit: int | None) -> list[dict[str, Any]]:
    cases = [c for c in load_paths([os.path.join(ROOT, "cases")]) if c.tier == "ci"][:limit]
    device = Device("cpu")
    be, loader = backend(device), KernelLoader()
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as root:
        cache = GoldenCache(root)
        for c in cases:
            for kernel in kernels_for(c.op):
                reply = execute_case(replace(c, kernel=kernel, env={}), device, be, cache, loader,
                                     intermediates="always")
                out.append({"case": c.case_id, "kernel": kernel,
                            "outcome": reply.outcome.value if reply.outcome else None,
                            "failure": None if reply.failure is None else
                            [reply.failure.stage.value, reply.failure.exc_type, reply.failure.message],
                            "summary": reply.summary, "report": reply.report, "metrics": _plain(reply.metrics)})
    return out


def comparisons(records: list[dict[str, Any]]) -> int:
    return sum(1 for r in records for row in r["metrics"].get("intermediates", {}).get("rows", [])
               if row["verdict"] != "missing")


def differences(before: list[dict[str, Any]], after: list[dict[str, Any]], show: int = 5) -> list[str]:
    if len(before) != len(after):
        return [f"{len(before)} records before, {len(after)} after"]
    found = []
    for b, a in zip(before, after):
        if json.dumps(b, sort_keys=True) != json.dumps(a, sort_keys=True):
            keys = [k for k in b if b.get(k) != a.get(k)] or ["(nan-only)"]
            found.append(f"{b['case']} with {b['kernel']}: {', '.join(keys)} differ")
    return found[:show] + ([f"... {len(found) - show} more"] if len(found) > show else [])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--against", help="an earlier record: exit 1 unless this one is identical")
    parser.add_argument("--cases", type=int, default=None, help="only the first N tier-ci cases")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("RACY_HEAD_SEED", "24")
    records = record(args.cases)
    with open(args.out, "w") as f:
        json.dump(records, f, sort_keys=True, indent=0)
    print(f"{len(records)} case runs, {comparisons(records)} intermediate comparisons -> {args.out}")
    if args.against:
        with open(args.against) as f:
            before = json.load(f)
        # through the same text: NaN and key order as json writes them
        diff = differences(_plain(json.loads(json.dumps(before, sort_keys=True))),
                           json.loads(json.dumps(records, sort_keys=True)))
        print("identical to " + args.against if not diff else "DIFFERENT from " + args.against + ":\n  " + "\n  ".join(diff))
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
