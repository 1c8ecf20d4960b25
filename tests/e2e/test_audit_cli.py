"""``harness audit`` end to end: exit 1 and the reason when a matrix is blind to a bug class,
exit 0 once a case that sees it is added, ``--min-score``, the JSON and Markdown files, exit 2."""
from __future__ import annotations

import json
import shutil

import pytest

from helpers import AUDIT_BLIND as BLIND, AUDIT_SEES as SEES, run_harness, write_case_file

MUTANTS = "slot_minus_one_write,nan_element"


def _audit(tmp_path, text, cache, *args):
    matrix = write_case_file(tmp_path / "cases", "m.yaml", text)
    return run_harness("audit", str(matrix), "--no-store", "--golden-cache", str(cache),
                       "--log-dir", str(tmp_path / "logs"), "--mutants", MUTANTS, *args, cwd=tmp_path)


@pytest.fixture(scope="module")
def blind_audit(tmp_path_factory):
    """One stored audit of the blind matrix, with its --json and --markdown: (its directory, the
    process). Several tests read it (one audit subprocess, not three); a test that opens its store
    copies the directory first (opening a store writes to it)."""
    base = tmp_path_factory.mktemp("blind-audit")
    matrix = write_case_file(base / "cases", "m.yaml", BLIND)
    proc = run_harness("audit", str(matrix), "--store", str(base / "results.sqlite"), "--golden-cache",
                       str(tmp_path_factory.mktemp("golden-cache")), "--log-dir", str(base / "logs"),
                       "--mutants", MUTANTS, "--json", str(base / "audit.json"), "--markdown", str(base / "audit.md"),
                       cwd=base)
    return base, proc


def _copy_of(blind_audit, tmp_path):
    """The shared audit's directory copied into ``tmp_path``, and its process."""
    base, proc = blind_audit
    shutil.copytree(base, tmp_path, dirs_exist_ok=True)
    return proc


def test_a_blind_matrix_exits_1_and_names_the_blind_spot(blind_audit):
    base, proc = blind_audit
    out, md = base / "audit.json", base / "audit.md"
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


def test_a_stored_audit_is_rendered_again_by_harness_report(tmp_path, blind_audit):
    """The audit document is stored with its run: ``harness report`` (the latest run, or its id)
    prints it, writes it in the formats an audit has and exits as the audit did; an audit's
    --json file is read back the same way; --junit is refused in one line."""
    proc = _copy_of(blind_audit, tmp_path)
    store, out = tmp_path / "results.sqlite", tmp_path / "audit.json"
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run_id = proc.stdout.split("audit run ")[1].split()[0]
    for source in ([], [run_id], [str(out)]):
        again = run_harness("report", *source, "--store", str(store), cwd=tmp_path)
        assert again.returncode == 1, again.stdout + again.stderr
        assert again.stdout.index("### Survivors") < again.stdout.index("### Killed")
        assert "no case has a slot < 0" in again.stdout
    html = tmp_path / "again.html"
    again = run_harness("report", run_id, "--store", str(store), "--html", str(html), "--json",
                        str(tmp_path / "again.json"), cwd=tmp_path)
    assert again.returncode == 1 and "no case has a slot &lt; 0" in html.read_text()
    assert json.loads((tmp_path / "again.json").read_text()) == json.loads(out.read_text())
    refused = run_harness("report", run_id, "--store", str(store), "--junit", str(tmp_path / "j.xml"), cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0 and "--junit" in refused.stderr


def test_a_case_history_counts_only_the_users_kernel_and_names_the_mutants(tmp_path, blind_audit):
    """After an audit, ``harness history CASE`` shows the audit's own run of the case (0% failed:
    the mutants' failures are not the case's); ``--mutants`` lists each mutant run under it with
    the case and the operator's name; ``flake --compare`` refuses a mutant's run in one line."""
    proc = _copy_of(blind_audit, tmp_path)
    store = tmp_path / "results.sqlite"
    assert proc.returncode == 1, proc.stdout + proc.stderr
    audit_id = proc.stdout.split("audit run ")[1].split()[0]

    plain = run_harness("history", "blind", "--store", str(store), cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    rows = plain.stdout.splitlines()[1:]
    assert len(rows) == 1 and audit_id in rows[0] and " audit " in rows[0], plain.stdout
    assert "1 PASS" in rows[0] and "0.0%" in rows[0] and rows[0].endswith("  blind")

    shown = run_harness("history", "blind", "--mutants", "--store", str(store), cwd=tmp_path)
    rows = shown.stdout.splitlines()[1:]
    assert rows[0] == plain.stdout.splitlines()[1]           # the audit's row is unchanged
    assert len(rows) == 3 and all("audit-mutant" in r for r in rows[1:]), shown.stdout
    assert rows[1].endswith("blind [mutant slot_minus_one_write]") and "1 PASS" in rows[1]
    assert rows[2].endswith("blind [mutant nan_element]") and "1 NONFINITE" in rows[2] and "100.0%" in rows[2]
    assert run_harness("history", "blind", "--kind", "audit", "--store", str(store),
                       cwd=tmp_path).stdout == plain.stdout

    mutant_id = rows[2].split()[2]
    refused = run_harness("flake", "--compare", audit_id, mutant_id, "--store", str(store), cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0, refused.stderr
    assert f"a run of audit mutant 'nan_element', not of your kernel; its audit's own run is {audit_id}" \
        in refused.stderr
