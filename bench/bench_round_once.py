"""False alarms of kernels that round once, over many seeds of small shapes.

    python bench/bench_round_once.py [--seeds 10000] [--kernels exact_round_once,reference] [--shapes rope,fused]
                                     [--before]

A kernel that computes every output and cache row exactly (fp64, ``tests/outside_kernels/
outside/exact_round_once.py``) and rounds each once to the stored dtype is correct by
definition; so is the shipped ``reference``.  Each runs the small shapes below with seeds
``0 .. N-1`` through ``harness.worker.execute.execute_case`` in this process (the inputs ->
golden -> launch -> checks path of a device worker, without the processes), and the script
prints, per kernel and shape, the cases that did not pass.  The goal: 0.

``--before`` also counts them under the check without the stored dtype's half ulp
(``checks.stored_dtype`` returning None: the bound ``atol + rtol*|g|`` alone), side by side.

Shapes (tiny geometry otherwise):
  rope    rope_kv_write, batch 1, 1 head, 1 KV head, head_dim 96, seq_lens const(1)  (the issue's)
  fused   fused_rope_decode_attention, batch 1, 4 heads, 2 KV heads, head_dim 32, seq_lens const(17)
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTSIDE = ROOT / "tests" / "outside_kernels"


def shapes():
    from harness.case import PRESETS, Case, SeqLens, SlotMode
    tiny = PRESETS["tiny"]
    return {
        "rope": Case("rope", "bench", "bench", "rope_kv_write", "", replace(
            tiny, batch=1, num_heads=1, num_kv_heads=1, head_dim=96), SeqLens("const", (1,)), SlotMode("arange"), 0),
        "fused": Case("fused", "bench", "bench", "fused_rope_decode_attention", "", replace(tiny, batch=1),
                      SeqLens("const", (17,)), SlotMode("arange"), 0),
    }


def target(kernel: str, op: str) -> str:
    return kernel if kernel == "reference" else f"outside.{kernel}:{op}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10000, help="seeds 0 .. N-1 (default 10000)")
    parser.add_argument("--kernels", default="exact_round_once,reference")
    parser.add_argument("--shapes", default="rope,fused")
    parser.add_argument("--before", action="store_true", help="also count without the half ulp")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(OUTSIDE))

    import torch
    from harness.devices import Device, backend
    from harness.goldens.cache import GoldenCache
    from harness.worker import checks
    from harness.worker.execute import KernelLoader, execute_case

    torch.set_num_threads(1)
    device = Device("cpu")
    loader, be, cache = KernelLoader(), backend(device), GoldenCache(None)
    with_ulp = checks.stored_dtype
    rules = [("half ulp", with_ulp)] + ([("without", lambda actual: None)] if args.before else [])
    print(f"load before: {os.getloadavg()[0]:.2f}; seeds 0..{args.seeds - 1}")
    print("| kernel | shape | check | cases | not passed | first seeds not passed | s |")
    print("|---|---|---|---|---|---|---|")
    total_bad = 0
    for kernel in args.kernels.split(","):
        for name in args.shapes.split(","):
            base = replace(shapes()[name], kernel=target(kernel, shapes()[name].op))
            for label, rule in rules:
                checks.stored_dtype = rule
                bad, t0 = [], time.perf_counter()
                for seed in range(args.seeds):
                    reply = execute_case(replace(base, seed=seed, case_id=f"{name}[seed={seed}]"),
                                         device, be, cache, loader)
                    if reply.failure is not None or reply.outcome.value != "PASS":
                        bad.append(seed)
                checks.stored_dtype = with_ulp
                dt = time.perf_counter() - t0
                if rule is with_ulp:
                    total_bad += len(bad)
                shown = ", ".join(map(str, bad[:6])) + (", ..." if len(bad) > 6 else "") or "-"
                print(f"| {kernel} | {name} | {label} | {args.seeds} | {len(bad)} | {shown} | {dt:.0f} |", flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
