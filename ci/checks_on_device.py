"""The checks on an accelerator give the CPU's verdicts (part of ci/device-check.sh).

    python3 ci/checks_on_device.py --device cuda:0

Every op's tiny case (batch 4, padded slots) with the reference kernel and with each audit
operator that applies to it, run in this process twice: on the CPU and on ``--device``, the
inputs drawn on each (the same bytes), the goldens computed on the host, the checks on the
device that holds the outputs.  Prints one line per case and exits 1 when an outcome,
summary, report or input digest differs.  On a machine without the device it says so and
exits 2.  The same comparison runs in CI on a CPU stand-in for an accelerator
(tests/unit/test_checks_on_device.py).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.audit.operators import OPERATORS, mutated  # noqa: E402
from harness.case import PRESETS, Case, SeqLens, SlotMode  # noqa: E402
from harness.devices import backend, parse_device  # noqa: E402
from harness.goldens.cache import GoldenCache  # noqa: E402
from harness.worker.execute import KernelLoader, execute_case  # noqa: E402

OPS = ("rope_kv_write", "paged_decode_attention", "fused_rope_decode_attention", "prefill_attention",
       "decode_layers")


def base_case(op: str) -> Case:
    """The op's tiny case: batch 4, some rows padded (slot -1), the reference kernel."""
    return Case(case_id=f"on-device[{op}]", matrix="on-device", source="ci", op=op, kernel="reference",
                geometry=replace(PRESETS["tiny"], batch=4), seq_lens=SeqLens("uniform", (1, 40)),
                slot_mode=SlotMode("padded", 0.25), seed=3)


def cases() -> list[tuple[str, Case]]:
    """(label, case): every op's base case, and each audit operator that applies to it around it
    (tests/unit/test_checks_on_device.py compares the same set on a CPU stand-in)."""
    found = []
    for op in OPS:
        case = base_case(op)
        found.append((f"{op} reference", case))
        for operator in OPERATORS:
            if operator.applies_to(case):
                delta = 0.05 if operator.name == "head_perturbed" else None
                found.append((f"{op} {operator.name}", mutated(case, operator, delta=delta)))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    device = parse_device(args.device)
    on_device = backend(device)
    absent = on_device.absent_reason(device)
    if absent:
        print(f"checks_on_device: {args.device}: {absent}", file=sys.stderr)
        return 2
    cpu = parse_device("cpu")
    differing = 0
    with tempfile.TemporaryDirectory() as tmp:
        goldens = GoldenCache(Path(tmp) / "goldens")
        for label, case in cases():
            saved = dict(os.environ)
            os.environ.update(case.env)          # the mutant wrapper reads its operator from the environment
            try:
                plain = execute_case(case, cpu, backend(cpu), goldens, KernelLoader())
                there = execute_case(case, device, on_device, goldens, KernelLoader())
            finally:
                os.environ.clear()
                os.environ.update(saved)
            same = ((plain.outcome, plain.summary, plain.report) == (there.outcome, there.summary, there.report)
                    and plain.metrics.get("inputs_digest") == there.metrics.get("inputs_digest")
                    and there.failure is None)
            differing += not same
            verdict = plain.outcome.value if plain.outcome else "no outcome"
            print(f"{'same' if same else 'DIFFERS':8s} {label:45s} {verdict}"
                  + ("" if same else f"\n  cpu:    {plain.summary}\n  {args.device}: "
                     f"{there.summary if there.failure is None else there.failure.message}"))
    print(f"checks_on_device: {differing} of {len(cases())} cases differ between cpu and {args.device}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
