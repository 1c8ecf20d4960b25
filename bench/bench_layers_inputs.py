"""Where the time of a qwen3-14b ``decode_layers`` case goes, at a few layers (issue 14).

    python bench/bench_layers_inputs.py [--layers 4] [--repeats 2] [--seq-lens "uniform(1, 3756)"]

The 40-layer case of cases/device/qwen3-14b-layers.yaml (batch 16, the full qwen3-14b
geometry, ``slot_mode: arange``) with ``num_layers`` set to ``--layers``, run in this process
by ``execute_case`` (the function the device worker runs) with its golden computed here (no
golden cache), on the CPU.  Prints the case's timings (inputs, golden, launch, checks), the
share of its time spent generating inputs (goal: ≤ 20%), and beside it a ``fill_`` of the
same number of bytes (``metrics.inputs_bytes``).  The first run is a warm-up; medians of
--repeats after it.
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from harness.casefiles import load_matrix
from harness.casefiles.values import parse_seq_lens
from harness.devices import Device, backend
from harness.goldens.cache import GoldenCache
from harness.worker.execute import KernelLoader, execute_case

MATRIX = Path(__file__).resolve().parent.parent / "cases" / "device" / "qwen3-14b-layers.yaml"
STAGES = ("inputs_s", "golden_s", "launch_s", "check_s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seq-lens", default=None, help="replace the case's seq_lens, e.g. 'const(1024)'")
    args = parser.parse_args()
    case = next(c for c in load_matrix(MATRIX)
                if c.geometry.num_layers == 40 and str(c.slot_mode) == "arange" and c.block_value is None)
    case = replace(case, geometry=replace(case.geometry, num_layers=args.layers))
    if args.seq_lens:
        case = replace(case, seq_lens=parse_seq_lens(args.seq_lens, "--seq-lens"))
    device = Device("cpu")
    be, loader, cache = backend(device), KernelLoader(), GoldenCache(None)
    runs: dict[str, list[float]] = {k: [] for k in (*STAGES, "total", "fill")}
    for attempt in range(args.repeats + 1):
        reply = execute_case(case, device, be, cache, loader)
        assert reply.failure is None, reply.failure
        timings, nbytes = reply.metrics["timings"], reply.metrics["inputs_bytes"]
        t0 = time.perf_counter()
        torch.empty(nbytes, dtype=torch.uint8).fill_(1)
        fill = time.perf_counter() - t0
        if attempt == 0:
            print(f"{case.case_id} at {args.layers} layers, {torch.get_num_threads()} torch threads: "
                  f"{nbytes / 1e9:.2f} GB of inputs, outcome {reply.outcome.value}")
            continue
        for k in STAGES:
            runs[k].append(timings[k])
        runs["total"].append(sum(timings[k] for k in STAGES))
        runs["fill"].append(fill)
    m = {k: statistics.median(v) for k, v in runs.items()}
    print("  ".join(f"{k} {m[k]:.2f}s" for k in (*STAGES, "total")))
    print(f"inputs share of the case: {m['inputs_s'] / m['total']:.1%} (goal <= 20%); "
          f"fill_ of the same bytes {m['fill']:.2f}s (inputs at {m['fill'] / m['inputs_s']:.2f}x fill)")


if __name__ == "__main__":
    main()
