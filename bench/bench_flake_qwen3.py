"""A fixed-seed flake hunt of the qwen3-14b fused decode case, with and without input reuse,
side by side with the kernel and its checks in-process (issue 14).

    python bench/bench_flake_qwen3.py [--iterations 10] [--repeats 1]

The case is the qwen3-14b fused decode case of cases/device/qwen3-14b-decode.yaml
(fused_rope_decode_attention, batch 16, seq_lens uniform(1, 3756), arange slots: about
244 MiB of inputs), run on ``cpu`` with the reference kernel.  Three measurements, in one run:

* ``reuse``: a ``--iterations`` fixed-seed hunt through the whole hunt path (plan, stop
  rules, engine, worker, bitwise comparison, store, summary).  The worker keeps the case's
  inputs, goldens and buffers after a clean iteration and restores them for the next one
  (``harness/worker/repeats.py``).
* ``no reuse``: the same hunt with ``HARNESS_REUSE_INPUTS=0`` in the worker's environment:
  every iteration draws its inputs again and reads its goldens from the golden process's file.
* ``kernel+checks``: in this process, per iteration, the reference kernel's launch
  (``launch.launch``: buffers allocated, kernel called), the checks (``checks.run_checks``)
  and the bitwise comparison with the first iteration (``determinism.diff_against_baseline``),
  on inputs and goldens made once beforehand.  This is the floor a hunt cannot go under.

Each hunt has a golden cache in a fresh directory (so it computes the golden once, in its
first iteration) and an untimed worker warm-up with another seed.  A hunt iteration's wall
time is the time between consecutive results reaching the front end (the first from the
start of the hunt).  Goal: a hunt with reuse <= 1.3x kernel+checks per iteration.  The
worker's own timings (inputs_s, golden_s, launch_s, check_s) are printed per iteration, so
where the time goes can be read off.  The load average is printed beside every figure: the
machine may be shared and the figures move with it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# As in the device worker (harness.run.spawn.THREADING_ENV): idle OpenMP threads sleep instead of
# spinning on the cores the working ones need.  Before torch is imported, which reads it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_golden_scale import mid_case  # noqa: E402

from harness.case import Case  # noqa: E402
from harness.devices import Device  # noqa: E402
from harness.flake import hunt as flake  # noqa: E402
from harness.flake.summary import summarize_hunt  # noqa: E402
from harness.goldens.cache import GoldenCache  # noqa: E402
from harness.run.engine import Engine, RunOptions  # noqa: E402
from harness.run.spawn import THREADING_ENV, WorkerOptions  # noqa: E402
from harness.run.session import execute  # noqa: E402
from harness.store import Store  # noqa: E402
from harness.worker import determinism  # noqa: E402
from harness.worker.checks import run_checks  # noqa: E402
from harness.worker.execute import KernelLoader  # noqa: E402
from harness.worker.inputs import generate, on_host# noqa: E402
from harness.worker.launch import launch  # noqa: E402
from harness.worker.repeats import ENV as REUSE_ENV  # noqa: E402


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def in_process(case: Case, n: int, tmp: Path) -> list[dict[str, float]]:
    """Per iteration: launch_s, check_s and determinism_s of the kernel on inputs made once."""
    device = torch.device("cpu")
    ci = generate(case, device)
    host = on_host(ci)
    goldens, _ = GoldenCache(tmp / "goldens-loop").get_or_compute(case.op, ci.spec, ci.args, torch.float32)
    kernel = KernelLoader().load(case.kernel, case.op)
    baselines, baseline = determinism.Baselines(), str(tmp / "loop-baseline.safetensors")
    warm = launch(kernel, ci, device, lambda: None)                   # warm-up, untimed
    run_checks(case, host, goldens, warm)
    del warm
    rows = []
    for i in range(n):
        t0 = time.perf_counter()
        launched = launch(kernel, ci, device, lambda: None)
        t1 = time.perf_counter()
        found = run_checks(case, host, goldens, launched)
        t2 = time.perf_counter()
        bits = determinism.diff_against_baseline(baselines, baseline, ci.op, launched.outputs, launched.caches,
                                                 i, found.outcome.passed)
        t3 = time.perf_counter()
        assert found.outcome.passed and bits["identical"], (found.summary, bits.get("report"))
        rows.append({"launch_s": t1 - t0, "check_s": t2 - t1, "determinism_s": t3 - t2, "total_s": t3 - t0})
        del launched
    return rows


def through_hunt(case: Case, n: int, tmp: Path, reuse: bool) -> dict:
    """The hunt's per-iteration wall times and the worker's metrics of each iteration."""
    env = {**THREADING_ENV, **os.environ, REUSE_ENV: "1" if reuse else "0"}
    tag = "reuse" if reuse else "fresh"
    options = RunOptions(devices=[Device("cpu")], run_device_tier_on_cpu=True,
                         worker=WorkerOptions(log_dir=tmp / f"logs-{tag}", golden_cache=str(tmp / f"goldens-{tag}"),
                                              base_env=env))
    hunt = flake.HuntOptions(repeat=n)
    stamps: list[float] = []

    def on_result(planned, result):
        stamps.append(time.perf_counter())
        rules.record(result)

    with Engine(options) as engine, Store(tmp / f"results-{tag}.sqlite") as store:
        engine.run_one(case.with_seed(99))                              # worker start-up, not timed
        rules = flake.StopRules(hunt)
        start = time.perf_counter()
        recorded = execute(flake.plan([case], hunt), options, store, kind="flake", engine=engine,
                           on_result=on_result, should_run=rules.should_run)
        summary = summarize_hunt(recorded.results)[case.case_id]
        elapsed = time.perf_counter() - start
    assert summary.total == n and summary.failures == 0 and summary.determinism.identical, summary
    results = sorted(recorded.results, key=lambda r: r.repeat)
    walls = [b - a for a, b in zip([start] + stamps[:-1], stamps)]
    return {"elapsed": elapsed, "walls": walls,
            "timings": [r.metrics.get("timings", {}) for r in results],
            "reused": [bool(r.metrics.get("inputs_reused")) for r in results],
            "kept": [r.metrics.get("inputs_kept_bytes", 0) for r in results],
            "computed": sum(1 for r in results if r.metrics.get("golden_cache_hit") is False),
            "load": load()}


def show_hunt(label: str, hunt: dict) -> None:
    print(f"  {label}: {hunt['elapsed']:.2f}s for {len(hunt['walls'])} iterations; inputs_reused "
          f"{sum(hunt['reused'])} of {len(hunt['reused'])}; goldens computed {hunt['computed']}; "
          f"load {hunt['load']}")
    print(f"    {'iter':>4} {'wall s':>7} {'inputs_s':>9} {'golden_s':>9} {'read_s':>7} {'launch_s':>9} "
          f"{'check_s':>8} {'reused':>6} {'kept MiB':>8}")
    for i, (wall, t, reused, kept) in enumerate(zip(hunt["walls"], hunt["timings"], hunt["reused"], hunt["kept"])):
        print(f"    {i:>4} {wall:>7.3f} {t.get('inputs_s', 0):>9.3f} {t.get('golden_s', 0):>9.3f} "
              f"{t.get('golden_read_s', 0):>7.3f} {t.get('launch_s', 0):>9.3f} {t.get('check_s', 0):>8.3f} "
              f"{str(reused):>6} {kept / 2**20:>8.0f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    case, n = mid_case(), args.iterations
    print(f"{case.case_id}, seed {case.seed}, on cpu; {n} iterations; {os.cpu_count()} cores; "
          f"torch {torch.__version__}; load {load()}", flush=True)
    floors, with_reuse, without = [], [], []
    for r in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            rows = in_process(case, n, Path(tmp))
            floor_load = load()
            print(f"repeat {r}: kernel+checks in-process (load {floor_load})")
            print(f"    {'iter':>4} {'launch_s':>9} {'check_s':>8} {'determ_s':>8} {'total_s':>8}")
            for i, row in enumerate(rows):
                print(f"    {i:>4} {row['launch_s']:>9.3f} {row['check_s']:>8.3f} {row['determinism_s']:>8.3f} "
                      f"{row['total_s']:>8.3f}")
            print(flush=True)
            floors.append(rows)
            with_reuse.append(through_hunt(case, n, Path(tmp), reuse=True))
            show_hunt(f"repeat {r}: hunt, reuse on", with_reuse[-1])
            without.append(through_hunt(case, n, Path(tmp), reuse=False))
            show_hunt(f"repeat {r}: hunt, {REUSE_ENV}=0", without[-1])
            print(flush=True)
    floor = statistics.median(statistics.fmean(row["total_s"] for row in rows) for rows in floors)
    print(f"summary, medians of {args.repeats} repeat(s); load {load()}")
    print(f"  kernel+checks in-process : {floor:7.3f} s/iteration (launch + checks + bitwise comparison)")
    for label, hunts in (("hunt, reuse on        ", with_reuse), (f"hunt, {REUSE_ENV}=0", without)):
        per = statistics.median(h["elapsed"] / n for h in hunts)
        later = statistics.median(statistics.median(h["walls"][1:]) if n > 1 else h["walls"][0] for h in hunts)
        reused = [sum(h["reused"]) for h in hunts]
        print(f"  {label}   : {per:7.3f} s/iteration ({per / floor:.2f}x), iterations 2..{n} median "
              f"{later:.3f} s ({later / floor:.2f}x); inputs_reused {reused} of {n}")
    print("  goal: hunt with reuse <= 1.3x kernel+checks per iteration")


if __name__ == "__main__":
    main()
