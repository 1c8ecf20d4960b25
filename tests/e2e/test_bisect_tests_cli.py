"""Bisect, compare and flake aimed at one test of a suite (``--test``, ``-k`` reaching JUnit tests), and
``bisect-run`` under a real ``git bisect run``: on a generated pure-Python library whose history has
a test committed already failing one commit before the tracked test's real regression
(tests/pylib_repo.py)."""
from __future__ import annotations

import html
import json
import os
import subprocess
import sys

import pytest

from gitrepo import git_env
from helpers import run_harness
from pylib_repo import OTHER, TRACKED, make_pylib_repo, suite_case


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    root = tmp_path_factory.mktemp("pylib")
    repo = make_pylib_repo(root / "textkit")
    cases = suite_case(root / "cases")
    return repo, cases, root


def _bisect(lib, tmp_path, *extra):
    repo, cases, root = lib
    return run_harness("bisect", str(cases), "--repo", str(repo.path), "--good", repo.shas[0], "--bad", "main",
                       "--worktree-cache", str(root / "wt"), "--no-store", "--no-progress", *extra,
                       cwd=tmp_path, timeout=240)


def test_a_suite_bisect_names_the_earlier_failure_and_warns(lib, tmp_path):
    repo = lib[0]
    proc = _bisect(lib, tmp_path, "--markdown", str(tmp_path / "b.md"), "--html", str(tmp_path / "b.html"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"first bad commit: {repo.other}" in proc.stdout
    assert f"failing at culprit: suite::{OTHER}\n" in proc.stdout
    assert f"failing at bad: suite::{TRACKED}, suite::{OTHER}" in proc.stdout
    assert (f"warning: bad fails tests that the culprit does not: only at bad: suite::{TRACKED}"
            in proc.stdout)
    step = next(line for line in proc.stdout.splitlines() if "(bad) sighted" in line)
    assert f"failed: suite::{TRACKED}, suite::{OTHER}" in step       # the step line names the tests
    md = (tmp_path / "b.md").read_text().replace("\\", "")
    assert f"warning: bad fails tests that the culprit does not: only at bad: suite::{TRACKED}" in md
    page = html.unescape((tmp_path / "b.html").read_text())      # the page says what the Markdown says
    assert f"First bad commit</strong>: <code>{repo.other[:12]}</code>" in page
    assert f"warning: bad fails tests that the culprit does not: only at bad: suite::{TRACKED}" in page


@pytest.mark.parametrize("aim", [["--test", "*test_slugify_stateless*"], ["--test", f"suite::{TRACKED}"],
                                 ["-k", "stateless"]], ids=["glob", "exact-id", "k"])
def test_a_bisect_aimed_at_one_test_names_its_culprit(lib, tmp_path, aim):
    repo = lib[0]
    proc = _bisect(lib, tmp_path, *aim)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"first bad commit: {repo.culprit}" in proc.stdout
    assert f"failing at culprit: suite::{TRACKED}\n" in proc.stdout
    assert "warning" not in proc.stdout
    assert OTHER not in proc.stdout              # the other test neither decides nor is listed


def test_a_test_that_names_nothing_stops_at_the_bad_endpoint_listing_the_tests(lib, tmp_path):
    proc = _bisect(lib, tmp_path, "--test", "*no_such_test*")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "--test '*no_such_test*': no test of suite matched" in line and "bad endpoint" in line
    assert "tests/test_textkit.py::test_slugify_stateless" in line


def test_compare_and_flake_count_only_the_tests_asked_for(lib, tmp_path):
    repo, cases, root = lib
    out = tmp_path / "c.json"
    proc = run_harness("compare", str(cases), "--repo", str(repo.path), "--worktree-cache", str(root / "wt"),
                       "--ref", f"before={repo.shas[4]}", "--ref", f"after={repo.culprit}", "--repeat", "2",
                       "--test", "*slugify*", "--no-store", "--no-progress", "--json", str(out),
                       cwd=tmp_path, timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = {row["case_id"]: row for row in json.loads(out.read_text())["compare"]}
    # no row for the suite's own status (it fails on both refs through the acronyms test) nor that test
    assert set(rows) == {"suite::tests/test_textkit.py::test_slugify", f"suite::{TRACKED}"}
    assert rows[f"suite::{TRACKED}"]["cells"] == {"before": "2/2 PASS",
                                                "after": "0/2 PASS, 2/2 FAILED (test failed: AssertionError)"}

    out = tmp_path / "f.json"
    proc = run_harness("flake", str(cases), "--repo", str(repo.path), "--worktree-cache", str(root / "wt"),
                       "--ref", f"before={repo.shas[4]}", "--repeat", "2", "--test", "*slugify*",
                       "--no-store", "--no-progress", "--json", str(out), cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr          # the acronyms test fails there: not asked for
    flake = json.loads(out.read_text())["flake"]
    assert set(flake) == {"suite::tests/test_textkit.py::test_slugify", f"suite::{TRACKED}"}
    assert all(s["failures"] == 0 and s["total"] == 2 for s in flake.values())

    proc = run_harness("flake", str(cases), "--repo", str(repo.path), "--worktree-cache", str(root / "wt"),
                       "--ref", f"before={repo.shas[4]}", "--repeat", "1", "--test", "*typo*",
                       "--no-store", "--no-progress", cwd=tmp_path, timeout=240)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--test '*typo*': no test of suite matched (its tests include: tests/test_textkit.py::test_slugify" \
        in proc.stderr


def _git_bisect_run(repo, cases, state, *extra) -> str:
    """``git bisect run harness bisect-run CASES ...`` in the library's own checkout; git's output."""
    env = {**git_env(), "XDG_CACHE_HOME": str(state)}
    run = lambda *a, **kw: subprocess.run(["git", *a], cwd=repo.path, env=env, capture_output=True, text=True,
                                          timeout=240, **kw)
    run("bisect", "start", "main", repo.shas[0], check=True)
    try:
        proc = run("bisect", "run", sys.executable, "-m", "harness", "bisect-run", str(cases), "--no-progress",
                   *extra)
        return proc.stdout + proc.stderr
    finally:
        run("bisect", "reset", check=True)


def test_git_bisect_run_runs_command_cases_in_the_checkout_it_made(lib, tmp_path):
    repo, cases, _ = lib
    # before: the suite ran in the case file's directory, failed to import, and every step was bad
    out = _git_bisect_run(repo, cases, tmp_path / "xdg", "--test", "*test_slugify_stateless*")
    assert f"{repo.culprit} is the first bad commit" in out, out
    assert "ModuleNotFoundError" not in out
    out = _git_bisect_run(repo, cases, tmp_path / "xdg")       # the whole suite: the earlier failure
    assert f"{repo.other} is the first bad commit" in out, out
    status = subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=repo.path, env=git_env(),
                            capture_output=True, text=True, check=True).stdout
    assert status == ""             # nothing written into the checkout (no __pycache__, no junit)
