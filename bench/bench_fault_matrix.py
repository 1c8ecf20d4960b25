"""A 200-case tiny matrix with 20 injected faults, beside the same matrix without them.

    python bench/bench_fault_matrix.py

Faults: 5 hangs (timeout_s 2), 5 segfaults, 5 emulated NPU device faults, 5 bounded
OOMs, spread through the matrix.  Checks every case has one result with the right class,
and prints wall times.  Goal (issue 3): faulty wall <= (clean wall + 5 x 2 s) x 1.2.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device
from harness.run.engine import Engine, Planned, RunOptions
from harness.run.spawn import WorkerOptions

OPS = ("rope_kv_write", "paged_decode_attention", "fused_rope_decode_attention")
FAULTS = {"hang": "HANG", "segfault": "CRASH", "npu_fault": "DEVICE_FAULT", "oom": "OOM"}
HANG_TIMEOUT_S = 2.0


def matrix(with_faults: bool) -> list[Case]:
    cases = []
    for i in range(200):
        kernel, timeout = "reference", 60.0
        if with_faults and i % 10 == 5:                      # 20 faults, every tenth case
            kernel = tuple(FAULTS)[(i // 10) % 4]
            timeout = HANG_TIMEOUT_S if kernel == "hang" else 60.0
        cases.append(Case(case_id=f"m[{i}]", matrix="m", source="bench", op=OPS[i % 3], kernel=kernel,
                          geometry=replace(PRESETS["tiny"], batch=4), seq_lens=SeqLens("multi_block"),
                          slot_mode=SlotMode("arange"), seed=i, timeout_s=timeout))
    return cases


def run(cases: list[Case], log_dir: Path):
    options = RunOptions(devices=[Device("cpu")], worker=WorkerOptions(log_dir=log_dir, golden_cache=""))
    start = time.perf_counter()
    with Engine(options) as engine:
        results = engine.run([Planned(i, c) for i, c in enumerate(cases)])
        replacements = engine.workers[0].replacements
    return time.perf_counter() - start, results, replacements


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        clean_s, clean, _ = run(matrix(False), Path(tmp) / "clean")
        faulty_cases = matrix(True)
        faulty_s, faulty, replacements = run(faulty_cases, Path(tmp) / "faulty")
    assert len(clean) == len(faulty) == 200 and all(r.outcome.value == "PASS" for r in clean)
    wrong = [(c.kernel, r.outcome.value) for c, r in zip(faulty_cases, faulty)
             if r.outcome.value != FAULTS.get(c.kernel, "PASS")]
    budget = (clean_s + 5 * HANG_TIMEOUT_S) * 1.2
    print(f"clean : 200 cases in {clean_s:6.2f} s")
    print(f"faulty: 200 cases in {faulty_s:6.2f} s, {len(faulty)} results, wrong classes: {wrong or 'none'}, "
          f"worker replacements: {replacements} (15 sticky faults)")
    print(f"budget (clean + 5 x {HANG_TIMEOUT_S:g} s) x 1.2 = {budget:.2f} s -> "
          f"{'within' if faulty_s <= budget else 'OVER'} ({faulty_s / budget:.2f} of it)")


if __name__ == "__main__":
    main()
