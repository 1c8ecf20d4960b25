"""Score the failure classifier on the collection of real public logs.

    python bench/score_public_logs.py [--verbose]

Reads tests/fixtures/logs/public/collection.yaml (each log with the outcome, label and code a
person reading it gives it) and counts the logs the classifier gets right: outcome, label and
code all equal; the logs marked ``held_out`` (gathered after the rules were written, labelled
before the classifier was run on them) are scored apart.  Run it with another checkout's ``harness`` first on PYTHONPATH to score that
version on the same logs (docs/benchmarks.md records the before/after).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
COLLECTION = ROOT / "tests" / "fixtures" / "logs" / "public"

if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))          # appended: a harness earlier on PYTHONPATH is the one scored

from harness.classify import classify_exception, classify_exit, classify_timeout, read_log  # noqa: E402
from harness.outcomes import label  # noqa: E402


def classify(name: str, spec: dict):
    text = read_log(COLLECTION / name)
    via = spec.get("via", "exception")
    if via == "exit":
        return classify_exit(spec["returncode"], text)
    if via == "timeout":
        return classify_timeout(2, text)
    return classify_exception("launch", spec.get("exc_type", "RuntimeError"), spec.get("message", ""), "", text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="print every log, not only the misses")
    args = parser.parse_args()
    expected = yaml.safe_load((COLLECTION / "collection.yaml").read_text())
    right = 0
    groups: dict[str, list[int]] = {}
    held = [0, 0]
    for name, spec in sorted(expected.items()):
        c = classify(name, spec)
        got = (c.outcome.value, label(c.outcome, c.code), c.code)
        want = (spec["outcome"], spec["label"], spec["code"])
        ok = got == want
        right += ok
        tally = groups.setdefault(name.split("_", 1)[0], [0, 0])
        tally[0] += ok
        tally[1] += 1
        if spec.get("held_out"):
            held[0] += ok
            held[1] += 1
        if args.verbose or not ok:
            print(f"{'ok ' if ok else 'BAD'} {name}: got {got}, want {want}")
    parts = ", ".join(f"{g} {r}/{n}" for g, (r, n) in sorted(groups.items()))
    print(f"{right}/{len(expected)} right ({parts}); held out: {held[0]}/{held[1]}")
    return 0 if right == len(expected) else 1


if __name__ == "__main__":
    raise SystemExit(main())
