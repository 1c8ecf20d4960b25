"""What every builtin case of the shipped matrix (cases/) and the bug-class matrix
(ci/bug-classes.yaml), and of the variations in tests/unit/data/parity_*.yaml, generates, written down so a move of op knowledge between core and pack
can be checked for changing nothing (issue 36): per case id, its inputs' digest (the bytes the
kernel and the golden get), the golden cache key, and the golden's own digest.

    python bench/pack_parity.py --write tests/unit/data/pack_parity.json   # record (inputs, keys, goldens)
    python bench/pack_parity.py --check tests/unit/data/pack_parity.json   # compare (exit 1 on a difference)
    python bench/pack_parity.py --add tests/unit/data/pack_parity.json     # record a new op's cases

``tests/unit/test_pack_parity.py`` runs the comparison on the small cases' inputs and keys; the
goldens' values and the large cases are compared here only (minutes of CPU).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from harness.casefiles import load_paths  # noqa: E402
from harness.goldens.cache import GoldenCache  # noqa: E402
from harness.worker.input_digest import digest_inputs  # noqa: E402
from harness.worker.inputs import generate  # noqa: E402

MATRICES = (ROOT / "cases", ROOT / "ci" / "bug-classes.yaml", *sorted((ROOT / "tests" / "unit" / "data").glob("parity_*.yaml")))
SMALL_BYTES = 64 << 20      # --small: the cases whose memory plan is under this (the unit test's share)


def builtin_cases(small: bool = False):
    """Every case of the matrices whose op a pack declares (spec and command cases have their own
    keys); ``small``: only those a unit test can generate in a moment."""
    from harness.memory_plan import plan
    for case in load_paths([str(p) for p in MATRICES]):
        if case.spec is None and case.command is None and (not small or plan(case).total < SMALL_BYTES):
            yield case


def record(case, goldens: bool) -> dict:
    ci = generate(case)
    entry = {"inputs": digest_inputs(ci.op, ci.args).digest,
             "key": GoldenCache(None).key(case.op, ci.spec)}
    if goldens:
        from harness import goldens as golden_ops
        values = golden_ops.compute(case.op, ci.args, torch.float32, exact=True)
        h = hashlib.blake2b(digest_size=8)
        for name in sorted(values):
            h.update(name.encode() + values[name].contiguous().view(torch.uint8).numpy().tobytes())
        entry["golden"] = h.hexdigest()
    return entry


def snapshot(goldens: bool = False, small: bool = False) -> dict[str, dict]:
    return {case.case_id: record(case, goldens) for case in builtin_cases(small)}


def differences(was: dict, now: dict) -> list[str]:
    lines = [f"{cid}: only {'before' if cid in was else 'now'}" for cid in sorted(set(was) ^ set(now))]
    for cid in sorted(set(was) & set(now)):
        for field in sorted(set(was[cid]) & set(now[cid])):
            if was[cid][field] != now[cid][field]:
                lines.append(f"{cid}: {field} {was[cid][field]} before, {now[cid][field]} now")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--write", metavar="FILE")
    what.add_argument("--check", metavar="FILE")
    what.add_argument("--add", metavar="FILE", help="record the cases FILE has no record of (a new op's), keep the rest")
    parser.add_argument("--no-goldens", action="store_true", help="inputs and keys only (seconds, not a minute)")
    args = parser.parse_args()
    if args.add:
        known = json.loads(Path(args.add).read_text())
        new = {c.case_id: record(c, not args.no_goldens) for c in builtin_cases() if c.case_id not in known}
        Path(args.add).write_text(json.dumps({**known, **new}, indent=1, sort_keys=True) + "\n")
        print(f"{len(new)} cases added to {args.add}")
        return 0
    now = snapshot(goldens=not args.no_goldens)
    if args.write:
        Path(args.write).parent.mkdir(parents=True, exist_ok=True)
        Path(args.write).write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"{len(now)} cases written to {args.write}")
        return 0
    lines = differences(json.loads(Path(args.check).read_text()), now)
    print("\n".join(lines) or f"{len(now)} cases: identical")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
