"""``harness audit`` end to end: exit 1 and the reason when a matrix is blind to a bug class,
exit 0 once a case that sees it is added, ``--min-score``, the JSON and Markdown files, exit 2."""
from __future__ import annotations

import json

from helpers import AUDIT_BLIND as BLIND, AUDIT_SEES as SEES, run_harness, write_case_file

MUTANTS = "slot_minus_one_write,nan_element"


def _audit(tmp_path, text, cache, *args):
    matrix = write_case_file(tmp_path / "cases", "m.yaml", text)
    return run_harness("audit", str(matrix), "--no-store", "--golden-cache", str(cache),
                       "--log-dir", str(tmp_path / "logs"), "--mutants", MUTANTS, *args, cwd=tmp_path)


def test_a_blind_matrix_exits_1_and_names_the_blind_spot(tmp_path, golden_cache_dir):
    out, md = tmp_path / "audit.json", tmp_path / "audit.md"
    proc = _audit(tmp_path, BLIND, golden_cache_dir, "--json", str(out), "--markdown", str(md))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "SURVIVED slot_minus_one_write" in proc.stdout and "no case has a slot < 0" in proc.stdout
    doc = json.loads(out.read_text())
    mutants = {m["name"]: m for m in doc["mutants"]}
    assert mutants["slot_minus_one_write"] == {**mutants["slot_minus_one_write"], "killed": False,
                                               "killed_by": [], "reason": "no case has a slot < 0"}
    assert mutants["nan_element"]["killed"] and list(mutants["nan_element"]["killing_outcomes"].values()) == ["NONFINITE"]
    assert doc["score"] == 0.5
    assert {c["name"]: c["covered"] for c in doc["coverage"]}["slot_negative"] is False
    text = md.read_text()
    assert text.index("### Survivors") < text.index("### Killed")


def test_the_matrix_with_a_warmup_case_kills_it_and_exits_0(tmp_path, golden_cache_dir):
    proc = _audit(tmp_path, SEES, golden_cache_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "killed   slot_minus_one_write" in proc.stdout and "(OOB_WRITE)" in proc.stdout


def test_min_score_gates_on_the_score_instead(tmp_path, golden_cache_dir):
    assert _audit(tmp_path, BLIND, golden_cache_dir, "--min-score", "0.5").returncode == 0
    assert _audit(tmp_path, BLIND, golden_cache_dir, "--min-score", "0.6").returncode == 1


def test_bad_usage_is_exit_2_in_one_line(tmp_path, golden_cache_dir):
    proc = _audit(tmp_path, BLIND, golden_cache_dir, "--mutants", "nope")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "--mutants" in proc.stderr
    proc = _audit(tmp_path, BLIND, golden_cache_dir, "--min-score", "2")
    assert proc.returncode == 2 and "--min-score" in proc.stderr


def test_head_perturbed_runs_at_delta_when_given_else_at_the_searched_one(tmp_path, golden_cache_dir):
    out = tmp_path / "audit.json"
    proc = _audit(tmp_path, BLIND, golden_cache_dir, "--mutants", "head_perturbed", "--delta", "0.5", "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(out.read_text())["head_perturbed_delta"] == {"source": "--delta", "delta": 0.5,
                                                                   "by_op": {"rope_kv_write": 0.5}}
    assert "scaled one head by 1 + 50.0% (--delta)" in proc.stdout
    proc = _audit(tmp_path, BLIND, golden_cache_dir, "--mutants", "head_perturbed", "--json", str(out))
    searched = json.loads(out.read_text())["head_perturbed_delta"]
    assert searched["source"] == "sensitivity" and 0 < searched["by_op"]["rope_kv_write"] < 0.5
    assert "the sensitivity search saw detected: rope_kv_write" in proc.stdout
