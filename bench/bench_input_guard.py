"""The read-only input check's cost per case: a copy compared with ``torch.equal`` (what
``harness/worker/input_guard.py`` does) beside an exact digest (an int64 position-weighted
sum of each input's bits), before and after the launch, on the CPU.

    python bench/bench_input_guard.py [--repeats 200]

Per op: the inputs of one tiny case (batch 4), median over --repeats; then one 256 MiB
float32 tensor (the size of a qwen3-14b weight), median of 3.
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import torch

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.ops import OPS
from harness.worker.input_guard import InputSeal
from harness.worker.inputs import generate

_BITS = {2: torch.int16, 4: torch.int32}


def digest(t: torch.Tensor) -> int:
    bits = t.view(_BITS[t.element_size()]).reshape(-1).to(torch.int64)
    return int((bits * torch.arange(1, bits.numel() + 1, dtype=torch.int64)).sum())


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def sides(inputs: dict[str, torch.Tensor], repeats: int) -> tuple[float, float]:
    copy = median_ms(lambda: InputSeal(inputs).written(), repeats)
    dig = median_ms(lambda: ([digest(t) for t in inputs.values()], [digest(t) for t in inputs.values()]), repeats)
    return copy, dig


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'op':30} {'inputs':>6} {'KiB':>7} {'copy+equal ms':>14} {'digest ms':>10}")
    for op in OPS:
        case = Case(case_id="b", matrix="b", source="b", op=op, kernel="reference",
                    geometry=replace(PRESETS["tiny"], batch=4), seq_lens=SeqLens("multi_block"),
                    slot_mode=SlotMode("arange"), seed=0, chunk_size=8 if op == "prefill_attention" else None)
        ci = generate(case)
        inputs = {a.name: ci.args[a.name] for a in ci.op.by_role("input")}
        kib = sum(t.numel() * t.element_size() for t in inputs.values()) / 1024
        copy, dig = sides(inputs, args.repeats)
        print(f"{op:30} {len(inputs):6} {kib:7.1f} {copy:14.3f} {dig:10.3f}")
    copy, dig = sides({"w": torch.randn(64 * 1024 * 1024)}, 3)
    print(f"{'one 256 MiB float32 tensor':30} {1:6} {256 * 1024:7} {copy:14.1f} {dig:10.1f}")


if __name__ == "__main__":
    main()
