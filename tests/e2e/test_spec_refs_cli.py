"""Spec ops across a library's history (docs/specs.md, docs/refs.md): a generated library holding its
own TensorSpec module and kernel (tests/gitrepo.py ``make_spec_repo``), one commit mis-scaling a
row.  ``compare`` and ``bisect`` with ``--kernel-path {worktree}`` (each ref's own checkout, not the
user's, which holds the bug), ``flake --ref`` (bitwise determinism), the reports of a compare
(JSON, JUnit, Markdown, HTML with the heatmap over the output's two dims), ``history`` over the
runs, ``git bisect run harness bisect-run`` and the pytest plugin.  The compare, bisect and flake
share one store in a module-scoped fixture; history reads it once."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gitrepo import git, make_spec_repo, spec_case_yaml
from helpers import ROOT, run_harness, write_case_file

pytestmark = pytest.mark.slow

CULPRIT = 3


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    """(base dir, shas, env, common args): the library (its checkout at the buggy HEAD) and case files."""
    base = tmp_path_factory.mktemp("spec-refs")
    shas = make_spec_repo(base / "slib", n_commits=6, culprit=CULPRIT)
    write_case_file(base / "cases", "scale.yaml", spec_case_yaml())
    write_case_file(base / "cases", "jitter.yaml", spec_case_yaml("jitter", "slib.kernels:scale_jitter"))
    env = {"HARNESS_SPEC_CHECK_CACHE": str(base / "spec-checks")}
    common = ["--repo", str(base / "slib"), "--kernel-path", "{worktree}", "--worktree-cache", str(base / "wt"),
              "--golden-cache", str(base / "goldens"), "--store", str(base / "r.sqlite"), "--no-progress"]
    return base, shas, env, common


@pytest.fixture(scope="module")
def compared(lib):
    base, shas, env, common = lib
    proc = run_harness("compare", str(base / "cases" / "scale.yaml"), "--ref", f"good={shas[0]}",
                       "--ref", f"bad={shas[-1]}", "--repeat", "4", *common, "--log-dir", str(base / "logs-c"),
                       "--json", str(base / "c.json"), "--junit", str(base / "c.xml"),
                       "--markdown", str(base / "c.md"), "--html", str(base / "c.html"), cwd=base, env=env)
    return proc, json.loads((base / "c.json").read_text())


@pytest.fixture(scope="module")
def bisected(lib, compared):
    base, shas, env, common = lib
    proc = run_harness("bisect", str(base / "cases" / "scale.yaml"), "--good", shas[0], "--bad", "main", *common,
                       "--log-dir", str(base / "logs-b"), "--json", str(base / "b.json"), cwd=base, env=env)
    return proc, json.loads((base / "b.json").read_text())["bisect"]


@pytest.fixture(scope="module")
def hunted(lib, bisected):
    base, shas, env, common = lib
    proc = run_harness("flake", str(base / "cases"), "--ref", f"good={shas[0]}", "--repeat", "3", *common,
                       "--log-dir", str(base / "logs-f"), "--json", str(base / "f.json"), cwd=base, env=env)
    return proc, json.loads((base / "f.json").read_text())["flake"]


def test_compare_runs_each_refs_own_checkout_and_says_regressed(lib, compared):
    base, shas, _, _ = lib
    proc, doc = compared
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (row,) = doc["compare"]
    # the user's checkout is at the buggy HEAD: "good" passing means its worktree was imported
    assert row["cells"] == {"good": "4/4 PASS", "bad": "0/4 PASS, 4/4 MISMATCH (y 24.6% bad)"}
    assert row["verdict"] == "regressed"
    bad = [r for r in doc["results"] if r["ref"] == "bad"]
    assert all("in dim0 [1]" in r["summary"] for r in bad)
    # one golden for both refs: the spec module is the same at every commit
    assert sum(r["metrics"]["golden_cache_hit"] is False for r in doc["results"]) == 1
    assert git(base / "slib", "status", "--porcelain") == ""


def test_compare_reports_junit_markdown_and_the_html_heatmap(lib, compared):
    base, _, _, _ = lib
    from junitparser import JUnitXml
    cases = [c for suite in JUnitXml.fromfile(str(base / "c.xml")) for c in suite]
    assert len(cases) == 8 and sum(not c.is_passed for c in cases) == 4
    markdown = (base / "c.md").read_text()
    assert "| scale | 4/4 PASS | 0/4 PASS, 4/4 MISMATCH \\(y 24\\.6% bad\\) | regressed" in markdown
    html = (base / "c.html").read_text()
    assert 'aria-label="localisation of y"' in html
    assert "y: bad-element ratio per dim0 x dim1 cell (dim0 0..3 down, dim1 0..63 across" in html


def test_bisect_names_the_commit_that_broke_the_spec_op(lib, bisected):
    _, shas, _, _ = lib
    proc, report = bisected
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["verdict"] == "FOUND" and report["culprit"]["sha"] == shas[CULPRIT]


def test_flake_on_a_ref_checks_bitwise_determinism(hunted):
    proc, flake = hunted
    assert flake["scale"]["clean"] == 3 and flake["scale"]["determinism"]["identical"] is True
    jitter = flake["jitter"]
    assert jitter["failures"] == 0 and jitter["determinism"]["identical"] is False
    assert jitter["determinism"]["differing"] == [1, 2]
    assert "y: 1 / 256 elements (0.391%) differ bitwise from iteration 0; first at index (0, 0)" in proc.stdout
    assert proc.returncode == 1, proc.stdout + proc.stderr


def test_history_shows_the_compare_bisect_and_flake_runs(lib, hunted):
    base, shas, env, _ = lib
    proc = run_harness("history", "scale", "--store", str(base / "r.sqlite"), cwd=base, env=env)
    assert proc.returncode == 0, proc.stderr
    kinds = {line.split()[3] for line in proc.stdout.splitlines() if line[:2] == "20" and len(line.split()) > 4}
    assert {"bisect-step", "flake"} <= kinds and any(k.startswith("compare") for k in kinds), proc.stdout
    assert shas[CULPRIT][:12] in proc.stdout and "MISMATCH" in proc.stdout


def test_git_bisect_run_with_the_checkout_as_kernel_path(tmp_path):
    shas = make_spec_repo(tmp_path / "slib", n_commits=6, culprit=CULPRIT)
    case = write_case_file(tmp_path / "cases", "scale.yaml", spec_case_yaml())
    git(tmp_path / "slib", "bisect", "start", shas[-1], shas[0])
    proc = subprocess.run(
        ["git", "bisect", "run", sys.executable, "-m", "harness", "bisect-run", str(case), "--kernel-path", ".",
         "--no-store", "--golden-cache", str(tmp_path / "g"), "--log-dir", str(tmp_path / "logs")],
        cwd=tmp_path / "slib", capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_SPEC_CHECK_CACHE": str(tmp_path / "sc")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{shas[CULPRIT]} is the first bad commit" in proc.stdout


def test_pytest_plugin_runs_a_spec_case_file_with_the_library_path(tmp_path):
    make_spec_repo(tmp_path / "slib", n_commits=CULPRIT + 1, culprit=CULPRIT)      # its HEAD has the bug
    write_case_file(tmp_path / "cases", "scale.yaml", spec_case_yaml())
    env = {**os.environ, "PYTEST_ADDOPTS": "", "HARNESS_SPEC_CHECK_CACHE": str(tmp_path / "sc")}
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "cases/scale.yaml",
                           "--harness-kernel-path", str(tmp_path / "slib"), "--golden-cache", str(tmp_path / "g"),
                           f"--junitxml={tmp_path / 'j.xml'}", "-q"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed" in proc.stdout and "MISMATCH" in proc.stdout and "in dim0 [1]" in proc.stdout
    from junitparser import JUnitXml
    (case,) = [c for suite in JUnitXml.fromfile(str(tmp_path / "j.xml")) for c in suite]
    assert case.name == "scale" and not case.is_passed
