"""Benchmark ratio_allclose against the two yardsticks it is held to.

    python bench/bench_ratio_allclose.py [--repeats 7] [--threads N] [--shape 160 152064]

On a [160, 152064] fp32 pair (24,330,240 elements, the logits of 160 tokens
over Qwen3's vocabulary) with some bad elements (scattered ones plus one
garbage token row) it times, interleaved round by round so that load on a
shared machine hits all three alike, the median of ``--repeats`` rounds of:

  ours     ratio_allclose(..., axes=("token", "vocab"))   (full report data)
  isclose  torch.isclose(a, b, rtol=, atol=).sum()        (must be slower than ours)
  copy     a.clone(); b.clone()                           (ours must be within 4x)

then ours alone (against copy) on an all-good pair, the common case, and on an
all-bad one, each also as the checker calls it for a bf16 output (``stored=bfloat16``:
the half-ulp floor, and ``atol_rms=0.02``: the per-row atol), against the goals
all good <= 0.6x, some bad (0.7%) <= 1.3x, all bad <= 2x a copy.  ``--timer cpu``
times process CPU time instead of wall time: on a loaded shared machine the wall
time of everything swings 2x from round to round, the CPU time much less (use it
with ``--threads 1``, where both sides run on one thread).  ratio_allclose runs its chunk ops on one thread (see
harness/compare.py); the yardsticks use torch's default thread count.

Peak extra memory is measured per method in a fresh subprocess
(``sys.executable``): every method is warmed up on a small pair, the inputs
are built, the kernel's peak-RSS mark is reset to the current RSS
(``/proc/self/clear_refs``), one call runs, and ``VmHWM - VmRSS(before)`` is
the peak growth: torch's CPU allocations as the kernel sees them (tracemalloc
would miss them).  Divided by the element count of one input it is the figure
reported; ``copy`` (two fp32 copies: ~8 B/element) calibrates it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.worker.ratio_allclose import ratio_allclose  # noqa: E402

ATOL = RTOL = 3e-3
RATIO = 0.005
METHODS = ("ours", "isclose", "copy")
GOALS = {"all good": 0.6, "some bad": 1.3, "all bad": 2.0}     # x a copy
CHECKER = dict(stored=torch.bfloat16, atol_rms=0.02)           # as the checker calls it for a bf16 output
CLOCK = time.perf_counter


SCENARIOS = ("some bad", "all good", "all bad")


def make_inputs(shape: tuple[int, int], scenario: str = "some bad"):
    """expected ~ N(0,1), actual = expected + noise, built in place (nothing transient).

    some bad: 1e-3 noise (a few elements over tolerance), every 10007th element
              off by 1 and token row 37 off by 1 (the timed comparison);
    all good: 1e-4 noise, nothing bad (the common case);
    all bad:  every element off by 1.
    """
    g = torch.Generator().manual_seed(0)
    expected = torch.empty(shape).normal_(generator=g)
    actual = torch.empty(shape).normal_(generator=g)
    actual.mul_(1e-4 if scenario == "all good" else 1e-3).add_(expected)
    if scenario == "some bad":
        actual.view(-1)[::10007].add_(1.0)
        if shape[0] > 37:
            actual[37].add_(1.0)
    elif scenario == "all bad":
        actual.add_(1.0)
    return actual, expected


def run(method: str, a: torch.Tensor, b: torch.Tensor):
    if method in ("ours", "checker", "previous", "previous checker"):
        fn = ratio_allclose if not method.startswith("previous") else _previous().ratio_allclose
        return fn(a, b, atol=ATOL, rtol=RTOL, max_error_ratio=RATIO, name="logits", axes=("token", "vocab"),
                  **(CHECKER if method.endswith("checker") else {}))
    if method == "isclose":
        return torch.isclose(a, b, rtol=RTOL, atol=ATOL).sum().item()
    if method == "copy":
        return a.clone(), b.clone()
    raise ValueError(method)


def _previous():
    """The implementation before the one-read-pass work, frozen for the equivalence test."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
    import ratio_allclose_reference
    return ratio_allclose_reference


def time_all(a, b, repeats: int, methods=METHODS) -> dict[str, float]:
    for m in methods:
        run(m, a, b)                                        # warm-up
    times: dict[str, list[float]] = {m: [] for m in methods}
    for _ in range(repeats):
        for m in methods:
            start = CLOCK()
            result = run(m, a, b)
            times[m].append(CLOCK() - start)
            del result
    return {m: statistics.median(ts) for m, ts in times.items()}


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child
    # started from a big parent would report the parent's peak.
    return _status_kib("VmHWM") * 1024


def rss_bytes() -> int:
    return _status_kib("VmRSS") * 1024


def measure_memory(method: str, shape: tuple[int, int]) -> dict[str, float]:
    """Runs in a fresh process: peak RSS growth of one call, per input element."""
    small_a, small_b = make_inputs((4, 1000))
    for m in METHODS:
        run(m, small_a, small_b)
    a, b = make_inputs(shape)
    if not reset_peak_rss():
        raise SystemExit("cannot reset the peak RSS (/proc/self/clear_refs)")
    before = rss_bytes()
    result = run(method, a, b)
    after = peak_rss_bytes()
    del result
    return {"method": method, "extra_bytes": after - before,
            "per_element": (after - before) / a.numel()}


def memory_in_subprocess(method: str, shape, threads) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--measure-memory", method,
           "--shape", *map(str, shape)]
    if threads:
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--shape", type=int, nargs=2, default=(160, 152064))
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--with-previous", action="store_true",
                        help="also time the previous implementation (tests/unit/ratio_allclose_reference.py), "
                             "interleaved, in each scenario")
    parser.add_argument("--timer", choices=("wall", "cpu"), default="wall",
                        help="wall: perf_counter (default); cpu: process CPU time (a loaded machine)")
    parser.add_argument("--measure-memory", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = tuple(args.shape)
    global CLOCK
    CLOCK = time.process_time if args.timer == "cpu" else time.perf_counter
    if args.measure_memory:
        print(json.dumps(measure_memory(args.measure_memory, shape)))
        return 0

    a, b = make_inputs(shape)
    numel = a.numel()
    print(f"shape {list(shape)} fp32 ({numel:,} elements per input), torch {torch.__version__},"
          f" {torch.get_num_threads()} threads, median of {args.repeats} interleaved rounds, {args.timer} time;"
          f" load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    c = run("ours", a, b)
    print(f"  ({c.bad_count:,} bad elements; first report line: {c.report().splitlines()[0]})")
    medians = time_all(a, b, args.repeats)
    for m in METHODS:
        print(f"  {m:8s} {medians[m] * 1e3:9.1f} ms   {numel / medians[m] / 1e6:8.1f} Melem/s")
    print(f"  ours / isclose = {medians['ours'] / medians['isclose']:.2f}   (must be < 1)")
    print(f"  ours / copy    = {medians['ours'] / medians['copy']:.2f}   (must be <= 4)")
    missed = []
    for scenario in SCENARIOS:
        del a, b
        a, b = make_inputs(shape, scenario)
        n_bad = run("ours", a, b).bad_count
        timed = ("ours", "checker") + (("previous", "previous checker") if args.with_previous else ())
        ours = time_all(a, b, args.repeats, methods=(*timed, "copy"))
        for m in timed:
            ratio = ours[m] / ours["copy"]
            ok = ratio <= GOALS[scenario]
            missed += [] if ok or m.startswith("previous") else [f"{m} on '{scenario}'"]
            print(f"  {m:16s} on '{scenario}' ({n_bad:,} bad): {ours[m] * 1e3:.1f} ms"
                  f" = {ratio:.2f} x copy (goal <= {GOALS[scenario]}: {'ok' if ok else 'MISSED'})")
    print(f"  goals missed: {len(missed)}{''.join(f'; {m}' for m in missed)}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if not args.no_memory:
        print("peak extra memory (VmHWM growth over one call, fresh process each):")
        for m in METHODS:
            mem = memory_in_subprocess(m, shape, args.threads)
            print(f"  {m:8s} {mem['extra_bytes'] / 2**20:9.1f} MiB   "
                  f"{mem['per_element']:.3f} B/element")
    return 0


if __name__ == "__main__":
    sys.exit(main())
