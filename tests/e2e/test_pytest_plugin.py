"""The pytest front end, black-box: write case files, run pytest in a subprocess, read its output."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from junitparser import JUnitXml

from helpers import write_case_file

CASES = """\
name: plug
op: rope_kv_write
seq_lens: multi_block
matrix:
  kernel: [reference, skip_rope, unguarded_slot_write]
  slot_mode: [arange, "padded(0.5)"]
"""


def run_pytest(*args: str, cwd, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTEST_ADDOPTS": ""}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_case_files_become_items_with_case_ids(tmp_path, golden_cache_dir):
    write_case_file(tmp_path / "cases", "plug.yaml", CASES)
    proc = run_pytest("cases", "--collect-only", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "cases/plug.yaml::plug[kernel=reference,slot_mode=arange]" in proc.stdout
    assert "6 tests collected" in proc.stdout


def test_k_selection_verdicts_and_junitxml(tmp_path, golden_cache_dir):
    write_case_file(tmp_path / "cases", "plug.yaml", CASES)
    junit = tmp_path / "junit.xml"
    proc = run_pytest("cases", "--device", "cpu", "-k", "padded", "--golden-cache", str(golden_cache_dir),
                      f"--junitxml={junit}", "-q", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout and "2 failed" in proc.stdout
    assert "OOB_WRITE" in proc.stdout and "MISMATCH" in proc.stdout
    xml = JUnitXml.fromfile(str(junit))
    cases = {c.name: c for suite in xml for c in suite}
    assert len(cases) == 3
    bad = cases["plug[kernel=unguarded_slot_write,slot_mode=padded(0.5)]"]
    assert not bad.is_passed


def test_exitfirst_stops_after_the_first_failure(tmp_path, golden_cache_dir):
    write_case_file(tmp_path / "cases", "plug.yaml", CASES)
    proc = run_pytest("cases", "-x", "-k", "skip_rope or unguarded", "--golden-cache", str(golden_cache_dir),
                      "-q", cwd=tmp_path)
    assert proc.returncode == 1
    assert "1 failed" in proc.stdout and "passed" not in proc.stdout


def test_bad_case_file_is_a_collection_error_with_its_line(tmp_path):
    write_case_file(tmp_path / "cases", "bad.yaml", "op: rope_kv_write\nslot_mode: sideways\n")
    proc = run_pytest("cases", "-q", cwd=tmp_path)
    assert proc.returncode == 2
    assert "bad.yaml:2" in proc.stdout


def test_xdist_workers_each_get_a_device(tmp_path, golden_cache_dir):
    write_case_file(tmp_path / "cases", "plug.yaml", CASES)
    proc = run_pytest("cases", "-n", "2", "--devices", "cpu,cpu", "-k", "reference",
                      "--golden-cache", str(golden_cache_dir), "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


def test_case_k_takes_the_harness_grammar(tmp_path, golden_cache_dir):
    write_case_file(tmp_path / "cases" / "nested", "plug.yaml", CASES)
    proc = run_pytest("cases", "--case-k", "kernel=reference and slot_mode=padded(0.5)",
                      "--golden-cache", str(golden_cache_dir), "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 5 deselected" in proc.stdout


def test_pytest_runs_write_one_run_to_the_store_across_xdist_workers(tmp_path, golden_cache_dir):
    import sqlite3

    write_case_file(tmp_path / "cases", "plug.yaml", CASES)
    store = tmp_path / "r.sqlite"
    proc = run_pytest("cases", "-n", "2", "--devices", "cpu,cpu", "--store", str(store),
                      "--golden-cache", str(golden_cache_dir), "-q", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    with sqlite3.connect(store) as db:
        runs = db.execute("select run_id, kind, summary from runs").fetchall()
        assert len(runs) == 1 and runs[0][1] == "pytest"
        outcomes = sorted(r[0] for r in db.execute("select outcome from results where run_id = ?", (runs[0][0],)))
    assert outcomes == ["MISMATCH", "MISMATCH", "OOB_WRITE", "PASS", "PASS", "PASS"]
    assert json.loads(runs[0][2])["total"] == 6


def test_repeat_runs_each_case_n_times_and_prints_the_flake_summary(tmp_path, golden_cache_dir):
    write_case_file(tmp_path / "cases", "rep.yaml", """\
        name: rep
        op: rope_kv_write
        seq_lens: "const(1)"
        matrix:
          kernel: [reference, reduction_order]
        """)
    proc = run_pytest("cases", "--repeat", "3", "--golden-cache", str(golden_cache_dir), "--no-store", "-q",
                      "-rf", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "4 passed" in proc.stdout and "2 failed" in proc.stdout    # iterations 1 and 2 of the jittery kernel
    assert "FAILED cases/rep.yaml::rep[kernel=reduction_order]@r1 - NONDETERMINISTIC" in proc.stdout
    assert "flake summary" in proc.stdout
    assert "rep[kernel=reference]: 3 runs on cpu" in proc.stdout
    assert "0 failures in 3 runs: failure rate <= 63.2% at 95%" in proc.stdout
    assert "NONDETERMINISTIC: 3 iterations gave 3 distinct bit patterns" in proc.stdout
    bad = run_pytest("cases", "--repeat", "0", cwd=tmp_path)
    assert bad.returncode == 4 and "--repeat must be at least 1" in bad.stderr
