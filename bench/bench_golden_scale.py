"""How long the host golden of the 40-layer qwen3-14b case takes, and what torch threads buy (issue 14).

    python bench/bench_golden_scale.py [--layers 1,2,3,4] [--repeats 1] [--skip-layers]

Two parts, each timing one thread against every core this process may use
(``golden_serve.host_cores()``), side by side in one run, as the golden process computes
goldens (``goldens.compute(..., exact=True)`` in fp32, on inputs drawn beforehand):

1. The thread choice (``golden_serve.golden_threads``): a small golden (the tiny fused
   decode case, under ``SMALL_GOLDEN_BYTES`` of inputs) and a mid-size one (the qwen3-14b
   fused decode case of cases/device/qwen3-14b-decode.yaml, batch 16, uniform(1, 3756)).
2. The qwen3-14b ``decode_layers`` case of cases/device/qwen3-14b-layers.yaml (batch 16,
   uniform(1, 3756), arange slots) at each of ``--layers``, full geometry otherwise; a
   least-squares line through (layers, seconds) extrapolated to the case's 40 layers.

Each figure is the median of ``--repeats`` timings after one untimed warm-up.  The load
average is printed beside the figures: on a shared machine they move with it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

# As in the golden process (harness.run.spawn.THREADING_ENV): idle OpenMP threads sleep instead
# of spinning on the cores the working ones need.  Before torch is imported, which reads it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from harness import goldens  # noqa: E402
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.casefiles import load_matrix
from harness.worker.golden_serve import SMALL_GOLDEN_BYTES, golden_threads, host_cores, input_bytes
from harness.worker.inputs import generate

DEVICE_CASES = Path(__file__).resolve().parent.parent / "cases" / "device"
FULL_LAYERS = 40


def layers_case(layers: int) -> Case:
    case = next(c for c in load_matrix(DEVICE_CASES / "qwen3-14b-layers.yaml")
                if c.geometry.num_layers == 40 and str(c.slot_mode) == "arange" and c.block_value is None)
    return replace(case, geometry=replace(case.geometry, num_layers=layers))


def mid_case() -> Case:
    return next(c for c in load_matrix(DEVICE_CASES / "qwen3-14b-decode.yaml")
                if c.op == "fused_rope_decode_attention" and str(c.seq_lens) == "uniform(1,3756)"
                and str(c.slot_mode) == "arange")


def small_case() -> Case:
    return Case(case_id="tiny-fused", matrix="bench", source="bench", op="fused_rope_decode_attention",
                kernel="reference", geometry=PRESETS["tiny"], seq_lens=SeqLens("uniform", (1, 60)),
                slot_mode=SlotMode("arange"), seed=1)


def golden_seconds(case: Case, args: dict, threads: int, repeats: int) -> float:
    """Median seconds of the case's golden on ``threads`` torch threads, after a warm-up."""
    torch.set_num_threads(threads)
    times = []
    for attempt in range(repeats + 1):
        t0 = time.perf_counter()
        goldens.compute(case.op, args, torch.float32, exact=True)
        if attempt:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def compare_threads(label: str, case: Case, cores: int, repeats: int) -> tuple[float, float]:
    """(one thread, every core) seconds for ``case``'s golden, measured alternately."""
    torch.set_num_threads(cores)
    args = generate(case).args
    nbytes = input_bytes(case)
    one = golden_seconds(case, args, 1, repeats)
    every = golden_seconds(case, args, cores, repeats)
    chosen = golden_threads(nbytes, cores)
    faster = 1 if one <= every else cores
    print(f"{label}: {nbytes / 2**20:.1f} MiB of inputs; 1 thread {one:.3f}s, {cores} threads {every:.3f}s "
          f"({one / every:.2f}x); golden_threads picks {chosen}, the faster here is {faster}", flush=True)
    return one, every


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of seconds against layers."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var if var else 0.0
    return my - slope * mx, slope


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", default="1,2,3,4", help="layer counts of the decode_layers case")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip-layers", action="store_true", help="only the thread choice")
    args = parser.parse_args()
    cores = host_cores()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {cores} cores; torch {torch.__version__}; "
          f"small goldens are < {SMALL_GOLDEN_BYTES >> 20} MiB of inputs", flush=True)
    compare_threads("small (tiny fused decode)", small_case(), cores, max(args.repeats, 5))
    compare_threads("mid (qwen3-14b fused decode, batch 16)", mid_case(), cores, args.repeats)
    if args.skip_layers:
        return
    one_points, every_points = [], []
    for layers in (int(x) for x in args.layers.split(",")):
        one, every = compare_threads(f"qwen3-14b decode_layers, {layers} layer(s)", layers_case(layers), cores,
                                     args.repeats)
        one_points.append((layers, one))
        every_points.append((layers, every))
    for label, points in (("1 thread", one_points), (f"{cores} threads", every_points)):
        intercept, slope = fit(points)
        print(f"{label}: {intercept:.2f}s + {slope:.2f}s per layer -> {FULL_LAYERS} layers "
              f"~{intercept + slope * FULL_LAYERS:.0f}s", flush=True)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
