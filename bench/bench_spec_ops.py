"""Spec ops (docs/specs.md): what the harness adds to a user's TensorSpec test.

    python bench/bench_spec_ops.py [--cases 200] [--rounds 6] [--mb 256] [--big-rounds 3]

1. Per-case overhead on a tiny op: the shipped RMSNorm spec module (``harness.kernels.specs.rmsnorm``,
   8 x 256 bf16) for ``--cases`` seeds through the engine (device worker, golden process computing
   every golden: no cache) side by side with a plain loop in this process doing what the library's
   own test does: seed, ``build_tensor_specs``, create the tensors through the module's callables,
   call the golden on copies and the kernel, ``torch.allclose``.  Rounds, every side once per round,
   order rotating; the ratio is the latency compare's (median of per-round ratios, sign-test 95%
   interval).  Goal: <= 1.3x (what the built-in ops are held to, bench_harness_overhead.py).
   A third side, ``execute_case`` in a loop in this process (the same checks, goldens computed
   in this process, no worker, no golden process, no isolation), is what the built-in ops' 1.3x
   is measured against; its ratio and the engine's overhead in ms per case are printed too.
2. A spec op of ``--mb`` MB of inputs (one fp32 input, a small output): the module's own cost
   (``build_tensor_specs`` and its ``init_value`` callables: the user's) against ours around it in
   the device worker: seeding, turning each created tensor into the spec's dtype and layout,
   the inputs' digest, and the launch's guarded, poisoned outputs and sealed inputs (timed with a
   kernel that writes its tiny output only).  Goal: ours <= 0.5x the user's.  The read-only
   input check (the CONTRACT check's copy and comparison) is timed and printed apart.
The load average is printed at the start and at the end.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path

from bench_harness_overhead import in_process_loop, through_engine   # the built-in ops' two sides
from harness.casefiles import load_matrix
from harness.latency.statistics import CONF, Side, compare

TINY = "harness.kernels.specs.rmsnorm"


def tiny_cases(n: int, tmp: Path):
    path = tmp / "tiny.yaml"
    path.write_text(f"name: tiny\nspec: {TINY}\nkernel: harness.kernels.specs.rmsnorm_kernels:rmsnorm\n"
                    f"params: {{rows: [8], hidden: [256]}}\nmax_error_ratio: 0.01\nseeds: [{', '.join(map(str, range(n)))}]\n")
    return load_matrix(path)


def plain_loop(cases) -> float:
    """The library's own test, case after case, in this process."""
    import torch

    from harness.kernels.specs import rmsnorm, rmsnorm_kernels
    from harness.worker import spec_module

    def one(seed: int) -> None:
        spec_module.seed_all(seed)
        specs = rmsnorm.build_tensor_specs(rows=8, hidden=256)
        t = {}
        for s in specs:
            if hasattr(s, "shape"):
                t[s.name] = (s.init_value() if callable(s.init_value) else torch.zeros(s.shape)).to(s.dtype)
            else:
                t[s.name] = s.value
        expected = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in t.items()}
        rmsnorm.golden_rmsnorm(expected)
        rmsnorm_kernels.rmsnorm(**t)
        assert torch.allclose(t["y"].float(), expected["y"].float(), rtol=1.6e-2, atol=1e-2)   # bf16: one ulp
    one(cases[0].seed)                         # warm, as the worker is
    start = time.perf_counter()
    for c in cases:
        one(c.seed)
    return time.perf_counter() - start


def big_module(mb: int) -> types.ModuleType:
    """A spec module of ``mb`` MB of fp32 input drawn by its own callable, and a 4 KB output."""
    import torch
    rows = 1024
    cols = mb * (1 << 20) // 4 // rows
    m = types.ModuleType("bench_big_spec")

    class TS:
        def __init__(self, name, shape, dtype, init_value=None, is_output=False):
            self.name, self.shape, self.dtype, self.init_value, self.is_output = name, shape, dtype, init_value, is_output
    m.build_tensor_specs = lambda: [TS("x", [rows, cols], torch.float32, init_value=lambda: torch.randn(rows, cols)),
                                    TS("y", [rows], torch.float32, is_output=True)]
    m.golden_rowsum = lambda t: t["y"].copy_(t["x"].sum(-1))
    sys.modules[m.__name__] = m
    return m


def big_sides(module) -> tuple[float, dict[str, float], float]:
    """(the user's seconds, ours by part, the read-only input check's) for one creation and launch of the big spec.
    Ours is what the issue lists around creation: seeding, the created tensors turned into the
    spec's dtype and layout, the inputs' digest, the guarded and poisoned outputs.  The read-only
    input check (a copy of each input before the launch, compared bit for bit after it: the
    CONTRACT check) is a check of the launch, as the output comparison is, and is timed apart."""
    import torch

    from harness.case import PRESETS, Case, SeqLens, SlotMode, Tolerance
    from harness.worker import launch as launching
    from harness.worker import spec_module
    from harness.worker.input_digest import digest_inputs
    from harness.worker.spec_inputs import generate

    # the user's: build_tensor_specs and every init_value callable, as their own test calls them
    t0 = time.perf_counter()
    specs = module.build_tensor_specs()
    made = [s.init_value() for s in specs if callable(s.init_value)]
    user = time.perf_counter() - t0
    del made
    entries = spec_module.build(module, {})
    case = Case(case_id="big", matrix="m", source="m:1", op="rowsum", kernel="k:f", geometry=PRESETS["tiny"],
                seq_lens=SeqLens("const", (1,)), slot_mode=SlotMode("arange"), seed=0,
                tolerance={"y": Tolerance(atol=1e-3, rtol=1e-3, max_error_ratio=0.0)},
                spec={"op": "rowsum", "module": module.__name__, "golden": "golden_rowsum", "params": {},
                      "compare": {}, "args": spec_module.table(entries)})
    # ours around it, as the worker does it: seed + build + create (the user's share taken out),
    # the digest, the launch with a kernel that writes its 4 KB output only
    t0 = time.perf_counter()
    ci = generate(case, torch.device("cpu"))
    created = time.perf_counter() - t0
    sealing: list[float] = []
    real_seal = launching.InputSeal

    class TimedSeal(real_seal):
        def __init__(self, inputs):
            t = time.perf_counter()
            super().__init__(inputs)
            sealing.append(time.perf_counter() - t)

        def written(self):
            t = time.perf_counter()
            try:
                return super().written()
            finally:
                sealing.append(time.perf_counter() - t)
    launching.InputSeal = TimedSeal
    try:
        t1 = time.perf_counter()
        digest_inputs(ci.op, {**ci.args, **ci.initial})
        t2 = time.perf_counter()
        launching.launch(lambda x, y: y.zero_(), ci, torch.device("cpu"), lambda: None)
        t3 = time.perf_counter()
    finally:
        launching.InputSeal = real_seal
    t4 = time.perf_counter()
    spec_module.seed_all(0)
    seeding = time.perf_counter() - t4
    # creation through the harness beyond the user's own (seeding, build, conversion): the difference
    # of two timings of the same callables, so it carries their noise; floored at the seeding
    parts = {"creation beyond the user's": max(created - user, seeding), "digest": t2 - t1,
             "launch (guard bands, poison)": t3 - t2 - sum(sealing)}
    return user, parts, sum(sealing)


def _noise(xs: list[float]) -> str:
    return f"±{50 * (max(xs) - min(xs)) / statistics.median(xs):.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--big-rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"         # the same thread count here as in the engine's processes
    import torch
    torch.set_num_threads(1)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        cases = tiny_cases(args.cases, Path(tmp))
        sides: dict[str, list[float]] = {"loop": [], "checks": [], "engine": []}
        runs = {"loop": lambda r: plain_loop(cases), "checks": lambda r: in_process_loop(cases),
                "engine": lambda r: through_engine(cases, Path(tmp) / f"l{r}")[0]}
        order = list(runs)
        for r in range(args.rounds):
            for name in order[r % 3:] + order[:r % 3]:
                sides[name].append(1000 * runs[name](r) / len(cases))

    def ratio(a: str, b: str):
        return compare(Side(a, tuple((x,) for x in sides[a])), Side(b, tuple((x,) for x in sides[b])),
                       conf=CONF)          # one look at a fixed number of rounds: 95%, as printed
    med = {k: statistics.median(v) for k, v in sides.items()}
    over = statistics.median(e - p for e, p in zip(sides["engine"], sides["loop"]))
    print(f"1. tiny spec op ({TINY}, 8 x 256 bf16), {len(cases)} cases, {args.rounds} rounds, goldens computed "
          f"on every side, torch threads 1")
    print(f"   plain loop   : {med['loop']:6.2f} ms/case (noise {_noise(sides['loop'])})")
    print(f"   execute_case : {med['checks']:6.2f} ms/case (noise {_noise(sides['checks'])})")
    print(f"   engine       : {med['engine']:6.2f} ms/case (noise {_noise(sides['engine'])}), "
          f"{over:.2f} ms/case more than the plain loop")
    for a, b, goal in (("loop", "engine", "goal <= 1.3x"), ("checks", "engine", "the built-in ops' measure")):
        r = ratio(a, b)
        print(f"   engine / {a:6s}: {r.ratio:7.3f}x, 95% CI {r.ci_low:.3f}-{r.ci_high:.3f}   ({goal})")
    module = big_module(args.mb)
    triples = [big_sides(module) for _ in range(args.big_rounds)]
    user = statistics.median(p[0] for p in triples)
    parts = {k: statistics.median(p[1][k] for p in triples) for k in triples[0][1]}
    ours = sum(parts.values())
    guard = statistics.median(p[2] for p in triples)
    print(f"2. spec op of {args.mb} MB of inputs, median of {args.big_rounds}: the module's own creation "
          f"{1000 * user:.0f} ms; ours (seeding, conversion, digest, guard bands, poison) {1000 * ours:.0f} ms: "
          f"{ours / user:.2f}x   (goal <= 0.5x)")
    print("   " + ", ".join(f"{k} {1000 * v:.0f} ms" for k, v in parts.items()))
    print(f"   the read-only input check (copy before, bit-for-bit compare after): {1000 * guard:.0f} ms, "
          f"{guard / user:.2f}x; with it {(ours + guard) / user:.2f}x")
    print(f"load average {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
