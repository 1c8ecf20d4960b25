"""A case's inputs against filling the same bytes, for the qwen3-14b fused decode case
(batch 16, seq_lens const(3756): 256 MB of inputs, almost all of it the two caches).

    python bench/bench_inputs.py [--rounds 7] [--threads 1,2] [--before REF] [--digest-before REF]

Per torch thread count, in rounds (every side once per round, the order rotating from round to
round, so drift and another tenant's burst fall on all sides alike): ``fill`` (torch.empty of the
inputs' bytes + fill_, the floor: it pays the same first-touch page faults), ``fill prefaulted``
(the same after ``prefault.prefault``), ``generation`` (``harness.worker.inputs.generate`` with no
stream base kept, as the first case of a seed in a worker), ``bases kept`` (the same with the
case's bases kept from an untimed call just before, as every later case of that seed),
``no prefault`` (the same with ``prefault.prefault`` a no-op: what prefaulting gives), ``before``
(``generate`` as it was at git ref --before; skipped when the ref is not there), ``digest``
(``input_digest.digest_inputs``) and ``digest before`` (at --digest-before).  Each side's time is
its median over the rounds with its noise (the sign-test 95% interval's half-width, relative).
Last, what a case's inputs cost (generation + digest, as the worker's inputs stage pays them) in
fills of the same bytes, per round: the median of the per-round ratios with its sign-test 95%
interval (6 rounds and more; the range below), and the load average during the rounds
(goal: ≤ 2x).  The workers run with ``OMP_WAIT_POLICY=PASSIVE``; so does this script unless the
environment says otherwise.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")     # as the workers get it; read when torch starts OpenMP

import torch  # noqa: E402

from harness import stats  # noqa: E402
from harness.case import PRESETS, Case, SeqLens, SlotMode  # noqa: E402
from harness.worker import counter_rng, prefault  # noqa: E402
from harness.worker.input_digest import digest_inputs  # noqa: E402
from harness.worker.inputs import generate# noqa: E402

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


def interval(values: list[float]) -> tuple[float, float]:
    """The sign-test 95% interval on the median (6 values and more), the range below that."""
    return stats.median_ci(values) or (min(values), max(values))


def cold(fn) -> float:
    """``fn``'s seconds with no stream base kept from before: what the first case of a seed pays."""
    counter_rng._kept.clear()
    return seconds(fn)


def warm(fn) -> float:
    """``fn``'s seconds with the bases it draws kept from an untimed call before: what every later
    case with the same seed pays in a worker (``counter_rng._KEPT_BASES``)."""
    fn()
    return seconds(fn)


def noise(values: list[float]) -> float:
    """The interval's half-width relative to the median."""
    lo, hi = interval(values)
    return (hi - lo) / 2 / statistics.median(values)


def without_prefault(case: Case):
    real = prefault.prefault
    prefault.prefault = lambda tensor, min_bytes=None: False
    try:
        return generate(case)
    finally:
        prefault.prefault = real


def fill_prefaulted(nbytes: int) -> None:
    t = torch.empty(nbytes, dtype=torch.uint8)
    prefault.prefault(t)
    t.fill_(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--before", default="fd1379c", help="git ref of a previous generator")
    parser.add_argument("--digest-before", default="e181fed", help="git ref of a previous digest")
    args = parser.parse_args()
    case = qwen3_fused_decode()
    ci = generate(case)
    found = digest_inputs(ci.op, ci.args)
    nbytes = found.nbytes
    del ci
    before = previous_generate(args.before)
    digest_before = previous(args.digest_before, "harness/worker/input_digest.py", "digest_inputs")
    probe = torch.empty(prefault.MIN_BYTES, dtype=torch.uint8)
    print(f"qwen3-14b fused decode, batch 16, 3756 tokens: {nbytes / 1e6:.0f} MB of inputs, digest {found.digest}; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}; MADV_POPULATE_WRITE "
          f"{'works' if prefault.prefault(probe) else 'unsupported'} here")
    del probe
    sides = {"fill": lambda: seconds(lambda: torch.empty(nbytes, dtype=torch.uint8).fill_(1)),
             "fill prefaulted": lambda: seconds(lambda: fill_prefaulted(nbytes)),
             "generation": lambda: cold(lambda: generate(case)),
             "bases kept": lambda: warm(lambda: generate(case)),
             "no prefault": lambda: cold(lambda: without_prefault(case))}
    if before is not None:
        sides["before"] = lambda: cold(lambda: before(case))
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        runs: dict[str, list[float]] = {k: [] for k in (*sides, "digest", "digest before")}
        loads = [os.getloadavg()[0]]
        names = list(sides)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                runs[name].append(sides[name]())
            drawn = generate(case)
            runs["digest"].append(seconds(lambda drawn=drawn: digest_inputs(drawn.op, drawn.args)))
            if digest_before is not None:
                runs["digest before"].append(seconds(lambda drawn=drawn: digest_before(drawn.op, drawn.args)))
            del drawn
            loads.append(os.getloadavg()[0])
        print(f"\n{threads} torch thread(s), {args.rounds} rounds, load average {min(loads):.1f}-{max(loads):.1f}")
        for name, values in runs.items():
            if values:
                print(f"  {name:>16}: {statistics.median(values):.3f} s (noise ±{100 * noise(values):.0f}%)")
        per_round = [(g + d) / f for f, g, d in zip(runs["fill"], runs["generation"], runs["digest"])]
        kept = [(g + d) / f for f, g, d in zip(runs["fill"], runs["bases kept"], runs["digest"])]
        unfaulted = [(g + d) / f for f, g, d in zip(runs["fill"], runs["no prefault"], runs["digest"])]
        for label, ratios in (("inputs (generation + digest) / fill", per_round),
                              ("the same, bases kept from the last case", kept),
                              ("the same without prefault", unfaulted)):
            lo, hi = interval(ratios)
            print(f"  {label}: {statistics.median(ratios):.2f}x (95% CI {lo:.2f}-{hi:.2f}x, rounds "
                  f"{min(ratios):.2f}-{max(ratios):.2f}x; goal <= 2x)")


if __name__ == "__main__":
    main()
