"""The same inputs on the host and on a device, and how fast the device draws them (issue 14).

    python bench/bench_device_inputs.py --device cuda:0 [--layers 40] [--repeats 2]

1. The qwen3-14b fused decode case (batch 16, ``const(3756)``) generated on the host and
   on ``--device``: both ``metrics.inputs_digest`` values, and whether every tensor is
   bit-identical (``torch.equal`` on the bytes, tensor by tensor).
2. The qwen3-14b ``decode_layers`` case at ``--layers`` layers (``slot_mode: arange``)
   generated on ``--device`` beside a ``fill_`` of the same bytes there, each followed by
   a synchronize; medians of --repeats after a warm-up.  Goal on an accelerator: 10 GB
   (40 layers) in under 1 s.

Runs on the CPU too (``--device cpu``), where part 1 compares the host with itself.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.casefiles import load_matrix
from harness.devices import backend, parse_device
from harness.worker.input_digest import digest_inputs
from harness.worker.inputs import generate

LAYERS = Path(__file__).resolve().parent.parent / "cases" / "device" / "qwen3-14b-layers.yaml"


def fused_decode() -> Case:
    return Case(case_id="qwen3-14b fused decode", matrix="bench", source="bench", op="fused_rope_decode_attention",
                kernel="reference", geometry=PRESETS["qwen3-14b"], seq_lens=SeqLens("const", (3756,)),
                slot_mode=SlotMode("arange"), seed=0, tier="device")


def layers_case(layers: int) -> Case:
    case = next(c for c in load_matrix(LAYERS)
                if c.geometry.num_layers == 40 and str(c.slot_mode) == "arange" and c.block_value is None)
    return replace(case, geometry=replace(case.geometry, num_layers=layers))


def same_bytes(a, b) -> bool:
    if not isinstance(a, torch.Tensor):
        return a == b
    a, b = a.detach().cpu().contiguous().view(-1), b.detach().cpu().contiguous().view(-1)
    return a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--layers", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    device = parse_device(args.device)
    be = backend(device)
    where = be.torch_device(device)
    sync = lambda: be.synchronize(device)          # noqa: E731

    case = fused_decode()
    host, there = generate(case), generate(case, where)
    sync()
    d_host, d_there = digest_inputs(host.op, host.args), digest_inputs(there.op, there.args)
    differ = [name for name in host.args if not same_bytes(host.args[name], there.args[name])]
    print(f"{case.case_id}: {d_host.nbytes / 1e6:.0f} MB; digest cpu {d_host.digest}, {args.device} {d_there.digest}; "
          f"{'identical bytes' if not differ else 'DIFFERENT: ' + ', '.join(differ)}")
    del host, there

    case = layers_case(args.layers)
    ci = generate(case, where)
    nbytes = digest_inputs(ci.op, ci.args).nbytes
    del ci
    runs: dict[str, list[float]] = {"generate": [], "fill": []}
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        x = torch.empty(nbytes, dtype=torch.uint8, device=where).fill_(1)
        sync()
        runs["fill"].append(time.perf_counter() - t0)
        del x
        t0 = time.perf_counter()
        ci = generate(case, where)
        sync()
        runs["generate"].append(time.perf_counter() - t0)
        del ci
    gen, fill = statistics.median(runs["generate"]), statistics.median(runs["fill"])
    print(f"qwen3-14b decode_layers at {args.layers} layers on {args.device}: {nbytes / 1e9:.2f} GB of inputs, "
          f"generated in {gen:.2f} s, fill_ {fill:.2f} s (generation {gen / fill:.2f}x a fill)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
