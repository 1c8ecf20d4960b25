"""Benchmark the failure classifier on big worker logs.

    python bench/bench_classify.py [--repeats 5] [--keep DIR] [--against RULES.yaml]

Writes, in a temporary folder, logs of CANN-runtime-shaped noise lines with the
root cause (an AICore exception) near the start and the cascade (error code is
507018) near the end, and times ``read_log`` + ``classify_exception`` on each
(median of ``--repeats`` runs, wall clock and this process's CPU time, the latter being
what to compare on a loaded machine; cold page cache not attempted):

  10MB           the goal: <= 0.3 s, whole file scanned
  100MB          read as its 4 MiB head + 12 MiB tail, so the time is flat
  10MB-badbytes  invalid UTF-8 sprinkled through the noise
  10MB-spam      every line carries a signature ("error code is 507018"): the
                 worst case for the needle prefilter (first/last 512 per needle)

``--against`` times another rule table (an older ``builtin.yaml``, say) on the same logs in the
same process, the two interleaved run by run, and prints the ratio of the CPU times: the
figure to compare across rule changes on a shared machine.

Each row also checks the class (the printed 507018 as the label, the AICore
exception as the cause, docs/classify.md) and prints
the process's peak RSS growth, to show that a 100 MB log is never held whole.
"""
from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.classify import builtin_rules, classify_exception, load_rules, read_log  # noqa: E402

CAUSE = (b"[ERROR] RUNTIME(48211,python):2026-03-14-09:21:07.512.334 [device_error_proc.cc:1057]48211 "
         b"ProcessStarsCoreErrorInfo: The aicore execution is abnormal, device_id=6, stream_id=3, task_id=12, "
         b"fault kernel_name=fused_rope_decode_attention_bf16_mix_aiv\n")
CASCADE = b"RuntimeError: NPU function error: aclrtSynchronizeStreamWithTimeout(stream, -1), error code is 507018\n"
WORDS = ("dispatch task stream kernel launch tensor copy memory block done ok value thread core wait event "
         "record device host scheduler ring heap slot page").split()


def _noise(n_lines: int, seed: int, bad_bytes: bool = False, spam: bool = False) -> bytes:
    rnd = random.Random(seed)
    out = []
    for i in range(n_lines):
        words = " ".join(rnd.choice(WORDS) for _ in range(10))
        line = (f"[INFO] RUNTIME(48211,python):2026-03-14-09:21:{i % 60:02d}.{i % 1000:03d}.000 "
                f"[stream.cc:{i % 900}]48211 Dispatch: {words}")
        if spam:
            line += f" (retry {i}: error code is 507018)"
        data = line.encode() + b"\n"
        if bad_bytes and i % 97 == 0:
            data = b"\xff\xfe\xc3\x28 " + data
        out.append(data)
    return b"".join(out)


def write_log(path: Path, size: int, **kw) -> None:
    block = _noise(4000, seed=1, **kw)
    with open(path, "wb") as fh:
        fh.write(block[:20_000])
        fh.write(CAUSE)
        while fh.tell() + len(block) + len(CASCADE) <= size:
            fh.write(block)
        rest = block[:size - fh.tell() - len(CASCADE)]
        fh.write(rest[:rest.rfind(b"\n") + 1])
        fh.write(CASCADE)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _once(path: Path, rules=None) -> tuple[float, float, object]:
    t0, c0 = time.perf_counter(), time.process_time()
    result = classify_exception("launch", "RuntimeError", "error code is 507018", "", read_log(path), rules=rules)
    return time.perf_counter() - t0, time.process_time() - c0, result


def bench(path: Path, repeats: int) -> tuple[float, float, object]:
    runs = [_once(path) for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), runs[-1][2]


def compare(path: Path, repeats: int, other) -> tuple[float, float]:
    """Median CPU seconds of the built-in rules and of ``other``, run alternately on one log."""
    ours, theirs = [], []
    for _ in range(repeats):
        ours.append(_once(path)[1])
        theirs.append(_once(path, other)[1])
    return statistics.median(ours), statistics.median(theirs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", default=None, help="write the logs here instead of a temporary folder")
    parser.add_argument("--against", default=None, help="also time this rules file, side by side (CPU time ratio)")
    args = parser.parse_args()
    other = load_rules(args.against) if args.against else None
    builtin_rules()                                   # load the rule data once, outside the timing
    rows = [("10MB", 10_000_000, {}), ("100MB", 100_000_000, {}),
            ("10MB-badbytes", 10_000_000, {"bad_bytes": True}), ("10MB-spam", 10_000_000, {"spam": True})]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"{'log':<15} {'size':>10} {'median s':>9} {'cpu s':>7} {'peak RSS +MB':>13}  class")
        base_rss = _peak_rss_mb()
        ok = True
        for name, size, kw in rows:
            path = folder / f"{name}.log"
            write_log(path, size, **kw)
            seconds, cpu, c = bench(path, args.repeats)
            good = c.code == 507018 and c.rule == "npu_aicore_abnormal"
            ok &= good
            print(f"{name:<15} {path.stat().st_size:>10} {seconds:>9.3f} {cpu:>7.3f} {_peak_rss_mb() - base_rss:>13.1f}  "
                  f"{c.outcome.value} {c.code} cause={c.rule}{'' if good else '  <-- WRONG'}")
            if other is not None:
                ours, theirs = compare(path, args.repeats, other)
                print(f"{'':<15} cpu s: built-in {ours:.3f}, {args.against} {theirs:.3f}: ratio {ours / theirs:.2f}")
    print("goal: 10MB <= 0.300 s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
