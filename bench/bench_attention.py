"""Which cases see which attention bug, at each attention sharpness; correct kernels at each.

    python bench/bench_attention.py [--attention uniform,peaked,sharp] [--set long,shipped]
                                    [--kernels reference,outside.tiled_masked,...,mutant:one_key_too_few,...]
                                    [--atol-rms 0.02|off] [--precision P] [--need]
                                    [--json out.json]

Runs, in this process (``harness.worker.execute.execute_case``: inputs -> golden -> kernel
-> checks, as a device worker does), every case of the chosen sets with every kernel at
every ``attention`` value (``--attention none``: the cases as they are, for a harness
without the axis: run this file with ``PYTHONPATH`` pointing at an older checkout to get
the figures from before).  Sets:

- ``long``: tiny geometry, batch 4, sequences of up to 2048 tokens (128 pages of 16),
  lengths drawn, fixed across page boundaries, and ``multi_block``: the cases where a
  page, boundary or length bug has the most keys to hide among;
- ``shipped``: the ci matrices of cases/ for the attention ops.

``--need`` also prints, per kernel and attention value, the largest fraction of a head's RMS
the kernel's ``out`` needed as its atol to pass (the ``max_error_ratio``-th worst element's
``|a - g| - max(rtol|g|, half_ulp(g)) - spread`` over its row's golden RMS; negative: it needs
none): what ``atol_rms`` must leave room for (docs/contracts.md, "The bound follows the signal").

``--atol-rms`` sets the ``atol_rms`` of every case's ``out`` (``off``: a fixed atol, the
bound before it followed the signal); by default each op's own.

Kernels: a builtin name, ``outside.<module>`` (tests/outside_kernels) or
``mutant:<operator>`` (an internal audit operator around the reference:
``off_by_one_page``, ``one_key_too_few``, ``one_key_too_many``, ``unmasked_tail``,
``block_too_many``).  Prints per kernel, set and attention value: cases run, cases failed
(any outcome but PASS / NEAR_TIE), and for mutants the cases they escaped; the wall time
and the load average.
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
from dataclasses import fields, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = ROOT / "tests" / "outside_kernels"
CORRECT = ("reference", "torch-sdpa", "torch-flex", "transformers-qwen3", "outside.exact_round_once",
           "outside.bf16_intermediate", "outside.torch_sdpa", "outside.torch_flex", "outside.transformers_qwen3",
           "outside.tiled_masked", "outside.bf16_probs", "outside.torch_sdpa_bf16")
# Correct for bf16 cases only: they round to bf16 inside (q/k/v, the probabilities, SDPA's math),
# eight times coarser than an fp16 case's contract admits, so they run the bf16 cases.
BF16_ONLY = ("outside.bf16_probs", "outside.torch_sdpa_bf16", "outside.bf16_intermediate")
MUTANTS = ("mutant:off_by_one_page", "mutant:one_key_too_few", "mutant:one_key_too_many", "mutant:unmasked_tail",
           "mutant:block_too_many", "outside.missed_first_key", "outside.bf16_accumulator")
PASSING = {"PASS", "NEAR_TIE"}
ATTENTION_OPS = ("paged_decode_attention", "fused_rope_decode_attention", "prefill_attention")
MUTANT_OPS = {"off_by_one_page": ATTENTION_OPS[1:]}      # the others: every attention op

LONG = {
    "long-paged": """
name: long-paged
op: paged_decode_attention
batch: 4
matrix:
  seq_lens: ["uniform(1, 2048)", "[2048, 2047, 2049, 1025]", multi_block]
  slot_mode: [random]
  seed: [0]
""",
    "long-fused": """
name: long-fused
op: fused_rope_decode_attention
batch: 4
matrix:
  seq_lens: ["uniform(1, 2048)", "[2048, 2047, 2049, 1025]", multi_block]
  slot_mode: [random]
  seed: [0]
""",
    "long-prefill": """
name: long-prefill
op: prefill_attention
batch: 4
chunk_size: 16
matrix:
  seq_lens: ["uniform(1, 2048)", "[2048, 2047, 2049, 1025]", multi_block]
  slot_mode: [random]
  seed: [0]
""",
}


def load_sets(names: list[str], tmp: Path):
    from harness.casefiles import load_paths
    cases = []
    if "long" in names:
        for name, text in LONG.items():
            path = tmp / f"{name}.yaml"
            path.write_text(text)
            cases += [("long", c) for c in load_paths([path])]
    if "shipped" in names:
        cases += [("shipped", c) for c in load_paths([ROOT / "cases"]) if c.tier == "ci" and c.op in ATTENTION_OPS]
    return cases


def kernel_case(case, kernel: str):
    """``case`` run by ``kernel``, or None when the kernel lacks the op."""
    import importlib
    from harness.ops.registry import BUILTINS
    if kernel in BF16_ONLY and case.dtype != "bf16":
        return None
    if kernel.startswith("mutant:"):
        if case.kernel != "reference" or case.op not in MUTANT_OPS.get(kernel.split(":", 1)[1], ATTENTION_OPS):
            return None
        env = {**case.env, "HARNESS_MUTANT": kernel.split(":", 1)[1], "HARNESS_MUTANT_KERNEL": "reference"}
        return replace(case, kernel="harness.kernels.mutants.operators", env=env)
    if kernel in BUILTINS:
        return replace(case, kernel=kernel) if case.op in BUILTINS[kernel] else None
    module = importlib.import_module(kernel)
    return replace(case, kernel=f"{kernel}:{case.op}") if hasattr(module, case.op) else None


def _spy_on_out() -> list:
    """The checks' comparison of ``out``, recorded (the arguments) as the checks call it."""
    from harness.worker import checks
    seen: list = []
    compare = checks.ratio_allclose

    def spy(actual, expected, **kw):
        if kw.get("name") == "out":
            seen.append((actual.detach().clone(), expected.detach().clone(), kw))
        return compare(actual, expected, **kw)
    checks.ratio_allclose = spy
    return seen


def _needed_fraction(call) -> float:
    import torch
    from harness.worker.ratio_allclose import half_ulp
    actual, expected, kw = call
    a, g = actual.double(), expected.double()
    slack = kw.get("slack")
    rows = kw.get("rows")
    if rows is not None:
        keep = rows.to(g.device)
        a, g, slack = a[keep], g[keep], None if slack is None else slack[keep]
    floor = half_ulp(g, kw["stored"]).double() if kw.get("stored") is not None else torch.zeros_like(g)
    need = (a - g).abs() - torch.maximum(kw["rtol"] * g.abs(), floor) - (0 if slack is None else slack.double())
    ratio = (need / g.pow(2).mean(-1, keepdim=True).sqrt().clamp_min(1e-30)).flatten()
    allowed = round(kw["max_error_ratio"] * ratio.numel())
    return float(ratio.sort(descending=True).values[allowed]) if allowed < ratio.numel() else -1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attention", default="uniform,peaked,sharp", help="values, or 'none' (no axis)")
    parser.add_argument("--set", default="long,shipped")
    parser.add_argument("--kernels", default=",".join(CORRECT + MUTANTS))
    parser.add_argument("--atol-rms", default=None, help="atol_rms of out: a fraction, or 'off' (default: the op's)")
    parser.add_argument("--precision", default=None, help="every case's precision preset (default: the case's)")
    parser.add_argument("--need", action="store_true", help="print the atol fraction of a head's RMS each kernel needed")
    parser.add_argument("--json", default=None)
    parser.add_argument("--show", type=int, default=0, help="print up to N failing (correct) / escaping (bug) cases")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(OUTSIDE))
    warnings.filterwarnings("ignore")

    import torch

    from harness.case import Case
    from harness.devices import Device, backend
    from harness.goldens.cache import GoldenCache
    from harness.worker.execute import KernelLoader, execute_case

    torch.set_num_threads(1)
    seen = _spy_on_out() if args.need else None
    has_axis = "attention" in {f.name for f in fields(Case)}
    values = [None] if args.attention == "none" else args.attention.split(",")
    if values != [None] and not has_axis:
        parser.error("this harness has no attention axis: use --attention none")
    kernels = [k for k in args.kernels.split(",") if k]
    device = Device("cpu")
    be, loader = backend(device), KernelLoader()
    rows: dict[tuple, dict] = defaultdict(lambda: {"cases": 0, "failed": 0, "listed": []})
    records = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cache = GoldenCache(Path(tmp) / "goldens")
        cases = load_sets(args.set.split(","), Path(tmp))
        for value in values:
            for group, base in cases:
                case = base if value is None else replace(base, attention=value)
                if args.precision is not None:
                    case = replace(case, precision=args.precision)
                if args.atol_rms is not None:
                    scaled = None if args.atol_rms == "off" else float(args.atol_rms)
                    case = replace(case, tolerance={**case.tolerance,
                                                    "out": replace(case.tolerance_for("out"), atol_rms=scaled)})
                for kernel in kernels:
                    kcase = kernel_case(case, kernel)
                    if kcase is None:
                        continue
                    saved = {k: os.environ.get(k) for k in kcase.env}
                    os.environ.update(kcase.env)      # what a worker does with a case's env
                    try:
                        reply = execute_case(kcase, device, be, cache, loader)
                    finally:
                        for k, v in saved.items():
                            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
                    outcome = reply.outcome.value if reply.failure is None else f"EXC:{reply.failure.exc_type}"
                    need = _needed_fraction(seen.pop()) if seen else None
                    summary = reply.to_wire().get("summary") or (reply.failure and reply.failure.message) or ""
                    row = rows[(kernel, group, value or "none")]
                    row["cases"] += 1
                    bug = kernel in MUTANTS or kernel.startswith("mutant:")
                    failed = outcome not in PASSING
                    row["failed"] += failed
                    if failed != bug:
                        row["listed"].append(f"{base.case_id}: {outcome} {summary}"[:200])
                    records.append({"kernel": kernel, "set": group, "attention": value, "case": base.case_id,
                                    "outcome": outcome, "summary": summary, "need": need})
                    if need is not None:
                        row["need"] = max(row.get("need", -1.0), need)
    elapsed = time.perf_counter() - t0
    print(f"{len(records)} case runs in {elapsed:.0f} s; load average {os.getloadavg()[0]:.1f}")
    print(f"{'kernel':32} {'set':8} {'attention':9} {'cases':>5} {'failed':>6}")
    for (kernel, group, value), row in rows.items():
        bug = kernel in MUTANTS or kernel.startswith("mutant:")
        note = f"  escaped {row['cases'] - row['failed']}" if bug else ""
        note += f"  needs {row['need']:.4f} x RMS" if "need" in row else ""
        print(f"{kernel:32} {group:8} {value:9} {row['cases']:5d} {row['failed']:6d}{note}")
        for line in row["listed"][:args.show]:
            print(f"{'':12}{line}")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
