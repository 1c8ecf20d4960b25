"""The shipped matrix (cases/) run on the CPU gives every case the outcome and label it had before
the five ops moved into the Qwen3 pack (issue 36; recorded at 700c223 in
tests/e2e/data/outcomes_before_packs.json), and every case added since (the sampling pack's)
passes.  Inputs, golden keys and golden values are compared by tests/unit/test_pack_parity.py."""
from __future__ import annotations

import json

from helpers import ROOT, results_by_id, run_harness


def test_the_shipped_matrix_gives_what_it_gave_before_the_packs(tmp_path):
    out = tmp_path / "out.json"
    proc = run_harness("run", str(ROOT / "cases"), "--device", "cpu", "--json", str(out), "--no-store",
                       "--log-dir", str(tmp_path / "logs"), cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    before = json.loads((ROOT / "tests" / "e2e" / "data" / "outcomes_before_packs.json").read_text())["cases"]
    now = {cid: [r["outcome"], r["label"]] for cid, r in results_by_id(out).items()}
    assert {cid: now.get(cid) for cid in before} == before
    added = {cid: v for cid, v in now.items() if cid not in before}
    assert added and all(outcome == "PASS" for outcome, _ in added.values()), added
