"""What a mismatch hint costs (harness/worker/hints.py): per op, one tiny case (batch 16,
multi_block) with a bug the hint names (gptj_rope) and one it does not (stale_kv); the
kernel's launch, the checks and the hint timed side by side in one process, medians of 3.

    .venv/bin/python bench/bench_hints.py
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import replace

import torch

from harness import goldens
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.kernels.mutants import gptj_rope, stale_kv
from harness.worker import checks, hints
from harness.worker.inputs import generate
from harness.worker.launch import launch

REPEATS = 3


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'op':28s} {'kernel':10s} {'outcome':9s} {'launch':>8s} {'checks':>8s} {'hint':>8s}  hint")
    for op in ("rope_kv_write", "fused_rope_decode_attention", "prefill_attention", "decode_layers"):
        for mod in (gptj_rope, stale_kv):
            if not hasattr(mod, op):
                continue
            extra = {"chunk_size": 64} if op == "prefill_attention" else {}
            case = Case(case_id="b", matrix="b", source="bench", op=op, kernel="reference",
                        geometry=replace(PRESETS["tiny"], batch=16), seq_lens=SeqLens("multi_block"),
                        slot_mode=SlotMode("arange"), seed=1, **extra)
            ci = generate(case)
            golden = goldens.compute(op, ci.args, exact=True)
            times: dict[str, list[float]] = {"launch": [], "checks": [], "hint": []}
            for _ in range(REPEATS):
                launched, t = timed(lambda: launch(getattr(mod, op), ci, torch.device("cpu"), lambda: None))
                times["launch"].append(t)
                found, t = timed(lambda: checks.run_checks(case, ci, golden, launched))
                times["checks"].append(t)
                hint, t = timed(lambda: hints.find_hint(case, ci, golden, launched, found, torch.float32))
                times["hint"].append(t)
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"{op:28s} {mod.__name__.rsplit('.', 1)[-1]:10s} {found.outcome.value:9s} "
                  f"{med['launch']:7.3f}s {med['checks']:7.3f}s {med['hint']:7.3f}s  {hint!r}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
