"""Input generation against filling the same bytes, for the qwen3-14b fused decode case
(batch 16, seq_lens const(3756): 256 MB of inputs, almost all of it the two caches).

    python bench/bench_inputs.py [--repeats 3] [--threads 1,2] [--before REF] [--digest-before REF]

Per torch thread count, in rounds (each side once per round, interleaved), median of
--repeats rounds: ``fill`` (torch.empty of the inputs' bytes + fill_, the floor: it pays the
same first-touch page faults), ``after`` (``harness.worker.inputs.generate``: counter-based
draws), ``before`` (the same function as it was at git ref --before, loaded from ``git
show``; skipped when the ref is not there), ``digest`` (``input_digest.digest_inputs``) and
``digest before`` (``digest_inputs`` as it was at --digest-before).  Ratios are fill time /
generation time: 1.0 is as fast as filling the bytes.  Last, what a case's inputs cost
(generation + digest, as the worker's inputs stage pays them) in fills of the same bytes,
per round: the median and the range over the rounds (goal ≤ 2×).
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.worker.input_digest import digest_inputs
from harness.worker.inputs import generate

ROOT = Path(__file__).resolve().parent.parent


def qwen3_fused_decode() -> Case:
    return Case(case_id="bench", matrix="bench", source="bench", op="fused_rope_decode_attention",
                kernel="reference", geometry=PRESETS["qwen3-14b"], seq_lens=SeqLens("const", (3756,)),
                slot_mode=SlotMode("arange"), seed=0, tier="device")


def previous(ref: str, source: str, name: str):
    """Function ``name`` of module file ``source`` as it was at ``ref``, or None when git cannot show it."""
    shown = subprocess.run(["git", "show", f"{ref}:{source}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        return None
    module_name = f"{Path(source).stem}_before"
    path = Path(tempfile.mkdtemp()) / f"{module_name}.py"
    path.write_text(shown.stdout)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module              # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return getattr(module, name)


def previous_generate(ref: str):
    """``generate`` as it was at ``ref``, or None when git cannot show it."""
    return previous(ref, "harness/worker/inputs.py", "generate")


def seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--before", default="fd1379c", help="git ref of the previous generator")
    parser.add_argument("--digest-before", default="e181fed", help="git ref of the previous digest")
    args = parser.parse_args()
    case = qwen3_fused_decode()
    ci = generate(case)
    found = digest_inputs(ci.op, ci.args)
    nbytes = found.nbytes
    del ci
    before = previous_generate(args.before)
    digest_before = previous(args.digest_before, "harness/worker/input_digest.py", "digest_inputs")
    print(f"qwen3-14b fused decode, batch 16, 3756 tokens: {nbytes / 1e6:.0f} MB of inputs, digest {found.digest}")
    print(f"{'threads':>7} {'fill s':>7} {'after s':>8} {'ratio':>6} {'before s':>9} {'ratio':>6} {'digest s':>9} "
          f"{'digest before s':>16}  inputs (generation + digest) / fill")
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        runs: dict[str, list[float]] = {k: [] for k in ("fill", "after", "before", "digest", "digest_before")}
        for _ in range(args.repeats):
            runs["fill"].append(seconds(lambda: torch.empty(nbytes, dtype=torch.uint8).fill_(1)))
            runs["after"].append(seconds(lambda: generate(case)))
            if before is not None:
                runs["before"].append(seconds(lambda: before(case)))
            drawn = generate(case)
            runs["digest"].append(seconds(lambda drawn=drawn: digest_inputs(drawn.op, drawn.args)))
            if digest_before is not None:
                runs["digest_before"].append(seconds(lambda drawn=drawn: digest_before(drawn.op, drawn.args)))
            del drawn
        m = {k: statistics.median(v) if v else float("nan") for k, v in runs.items()}
        fills = sorted((a + d) / f for f, a, d in zip(runs["fill"], runs["after"], runs["digest"]))
        print(f"{threads:>7} {m['fill']:>7.3f} {m['after']:>8.3f} {m['fill'] / m['after']:>6.2f} "
              f"{m['before']:>9.3f} {m['fill'] / m['before']:>6.2f} {m['digest']:>9.3f} {m['digest_before']:>16.3f}  "
              f"{statistics.median(fills):.2f}x (rounds {fills[0]:.2f}-{fills[-1]:.2f}x)")


if __name__ == "__main__":
    main()
