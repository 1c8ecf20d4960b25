"""Score the failure classifier on the collection of real public logs.

    python bench/score_public_logs.py [--verbose] [--set public|public2 ...]

Reads tests/fixtures/logs/<set>/collection.yaml for each set (default: every set; ``public``
is the first collection, ``public2`` the fresh one of issue 38) (each log with the outcome, label and code a
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
LOGS = ROOT / "tests" / "fixtures" / "logs"
SETS = ("public", "public2")

if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))          # appended: a harness earlier on PYTHONPATH is the one scored

from harness.classify import classify_exception, classify_exit, classify_timeout, read_log  # noqa: E402
from harness.outcomes import label  # noqa: E402


def classify(folder: Path, name: str, spec: dict):
    text = read_log(folder / name)
    via = spec.get("via", "exception")
    if via == "exit":
        return classify_exit(spec["returncode"], text)
    if via == "timeout":
        return classify_timeout(2, text)
    return classify_exception("launch", spec.get("exc_type", "RuntimeError"), spec.get("message", ""), "", text)


def score(folder: Path, verbose: bool) -> bool:
    """Print one set's misses (every log with --verbose) and its score; True when all are right."""
    expected = yaml.safe_load((folder / "collection.yaml").read_text())
    right = 0
    groups: dict[str, list[int]] = {}
    held = [0, 0]
    for name, spec in sorted(expected.items()):
        c = classify(folder, name, spec)
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
        if verbose or not ok:
            print(f"{'ok ' if ok else 'BAD'} {folder.name}/{name}: got {got}, want {want}")
    parts = ", ".join(f"{g} {r}/{n}" for g, (r, n) in sorted(groups.items()))
    print(f"{folder.name}: {right}/{len(expected)} right ({parts}); held out: {held[0]}/{held[1]}")
    return right == len(expected)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="print every log, not only the misses")
    parser.add_argument("--set", action="append", choices=SETS, help="score only this collection (repeatable)")
    args = parser.parse_args()
    results = [score(LOGS / name, args.verbose) for name in (args.set or SETS)]
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
