"""`harness compare`, `bisect` and `bisect-run` on generated kernel-library repositories."""
from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from gitrepo import SEED_ENV, git, make_kernel_repo
from helpers import ROOT, run_harness

ENV_TEMPLATE = "PYTHONPATH={worktree}/python:{PYTHONPATH}"


def _corrupts(seed: int, call: int, p: float) -> bool:
    """The generated kernel's draw for global call number ``call`` (see tests/gitrepo.py)."""
    return random.Random(f"{seed}:{call}").random() < p


def _user_repo_state(repo) -> tuple:
    return (git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain"), git(repo, "branch", "--list"),
            git(repo, "stash", "list"))


@pytest.fixture
def counter_env(tmp_path):
    """Draws numbered across worker processes, so the failing runs are known in advance."""
    return {"KPKG_FLAKE_COUNTER": str(tmp_path / "calls"), SEED_ENV: "0"}


def test_compare_three_refs_table_verdict_and_build_error(tmp_path, golden_cache_dir, counter_env):
    info = make_kernel_repo(tmp_path / "kpkg", n_commits=12, culprit=5, fail_p=0.5, broken_build=8)
    (tmp_path / "kpkg" / "scratch.txt").write_text("the user's uncommitted work\n")
    before = _user_repo_state(info.path)
    case = tmp_path / "case.yaml"
    case.write_text(info.case_yaml)
    out = tmp_path / "compare.json"
    proc = run_harness("compare", str(case), "--repo", str(info.path), "--ref", f"good={info.shas[2]}",
                       "--ref", f"flaky={info.shas[7][:10]}", "--ref", f"broken={info.shas[8]}", "--repeat", "4",
                       "--env", ENV_TEMPLATE, "--build", info.build_cmd, "--worktree-cache", str(tmp_path / "wt"),
                       "--golden-cache", str(golden_cache_dir), "--store", str(tmp_path / "r.sqlite"),
                       "--log-dir", str(tmp_path / "logs"), "--json", str(out), "--markdown", str(tmp_path / "c.md"),
                       "--junit", str(tmp_path / "c.xml"), cwd=tmp_path, env=counter_env)
    assert proc.returncode == 1, proc.stdout + proc.stderr          # the candidate (last ref) fails
    doc = json.loads(out.read_text())
    assert doc["kind"] == "compare"
    assert [r["name"] for r in doc["refs"]] == ["good", "flaky", "broken"]
    assert doc["refs"][1]["sha"] == info.shas[7] and doc["refs"][2]["build"]["ok"] is False
    (row,) = doc["compare"]
    flaky_fails = sum(_corrupts(0, call, 0.5) for call in range(4, 8))   # calls 0-3 ran on the good ref
    assert row["cells"]["good"] == "4/4 PASS"
    # a failing label carries its key detail: the buffer and its bad fraction, the build's failure
    expected = f"{4 - flaky_fails}/4 PASS" + (f", {flaky_fails}/4 MISMATCH (query 25.0% bad)" if flaky_fails else "")
    assert row["cells"]["flaky"] == expected
    assert row["cells"]["broken"].startswith("0/4 PASS, 4/4 BUILD_ERROR (")
    assert row["verdict"] == "regressed"                      # 0/4 -> 4/4 failures, Fisher p = 0.029
    assert {r["ref"] for r in doc["results"]} == {"good", "flaky", "broken"}
    ran = [r for r in doc["results"] if r["outcome"] != "BUILD_ERROR"]
    assert sum(r["metrics"]["golden_cache_hit"] is False for r in ran) == 1     # one golden for every ref
    assert "good " in proc.stdout and "4/4 PASS" in proc.stdout
    markdown = (tmp_path / "c.md").read_text()
    assert f"| case | good {info.shas[2][:7]} | flaky {info.shas[7][:7]} | broken {info.shas[8][:7]} | verdict |" \
        in markdown
    assert r"0/4 PASS, 4/4 BUILD\_ERROR \(" in markdown and r" | regressed \(Fisher p = 0\.0286\) |" in markdown
    from junitparser import JUnitXml
    cases = [c for suite in JUnitXml.fromfile(str(tmp_path / "c.xml")) for c in suite]
    # only the candidate's (broken's) failing runs fail; the flaky ref in between is reported, not red
    assert len(cases) == 12 and sum(not c.is_passed for c in cases) == 4
    assert sum("not a failure of this compare" in (c.system_out or "") for c in cases) == flaky_fails
    assert _user_repo_state(info.path) == before
    assert (tmp_path / "kpkg" / "scratch.txt").read_text() == "the user's uncommitted work\n"


@pytest.mark.parametrize("ref, needle", [
    ("x=--upload-pack=touch", "starts with '-'"),
    ("x=no-such-branch", "not a commit"),
])
def test_bad_refs_are_refused_before_anything_runs(tmp_path, ref, needle):
    info = make_kernel_repo(tmp_path / "kpkg", n_commits=2)
    case = tmp_path / "case.yaml"
    case.write_text(info.case_yaml)
    proc = run_harness("compare", str(case), "--repo", str(info.path), "--ref", f"a={info.shas[0]}", "--ref", ref,
                       "--no-store", "--worktree-cache", str(tmp_path / "wt"), "--log-dir", str(tmp_path / "logs"),
                       cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "logs").exists()



def _saved_steps(store) -> int:
    """Steps in the stored bisect's saved state (0 until there is one)."""
    try:
        with sqlite3.connect(store) as conn:
            row = conn.execute("SELECT extra FROM runs WHERE kind = 'bisect'").fetchone()
    except sqlite3.Error:
        return 0
    return len(json.loads(row[0] or "{}").get("bisect", {}).get("state", {}).get("steps", [])) if row else 0


def test_bisect_finds_a_flaky_culprit_and_resumes_after_a_kill(tmp_path, golden_cache_dir, counter_env):
    culprit = random.Random(7).randrange(3, 30)          # "a random commit", fixed for the test's sake
    info = make_kernel_repo(tmp_path / "kpkg", n_commits=33, culprit=culprit, fail_p=0.5, broken_build=culprit - 2)
    case = tmp_path / "case.yaml"
    case.write_text(info.case_yaml)
    store = tmp_path / "r.sqlite"
    common = ["--env", ENV_TEMPLATE, "--build", info.build_cmd, "--worktree-cache", str(tmp_path / "wt"),
              "--golden-cache", str(golden_cache_dir), "--store", str(store), "--log-dir", str(tmp_path / "logs")]
    env = {**os.environ, **counter_env}
    proc = subprocess.Popen([sys.executable, "-m", "harness", "bisect", str(case), "--repo", str(info.path),
                             "--good", info.shas[0], "--bad", "main", "--confidence", "0.999", *common],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        # the bisect's saved state, not the finished step rows: a step's run is finished a moment
        # before the state that counts it is saved, and a kill in between left one step fewer
        while _saved_steps(store) < 6 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the bisect ended before it could be interrupted:\n" + proc.stdout.read()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)                # the front end and its workers, mid-bisect
        proc.wait()
    with sqlite3.connect(store) as conn:
        (bisect_id,) = conn.execute("SELECT run_id FROM runs WHERE kind = 'bisect'").fetchone()
        saved = json.loads(conn.execute("SELECT extra FROM runs WHERE run_id = ?", (bisect_id,)).fetchone()[0])
    runs_before = len(saved["bisect"]["state"]["steps"])
    assert runs_before >= 6

    out = tmp_path / "bisect.json"
    resumed = run_harness("bisect", "--resume", bisect_id, "--json", str(out), *common, cwd=tmp_path,
                          env=counter_env, timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resuming after {runs_before} steps" in resumed.stdout
    assert f"first bad commit: {info.culprit_sha}" in resumed.stdout
    report = json.loads(out.read_text())["bisect"]
    assert report["verdict"] == "FOUND" and report["culprit"]["sha"] == info.culprit_sha
    assert report["probability"] >= 0.999
    assert report["culprit"]["author_date"].startswith("2024-01-01")
    tally = {t["sha"]: t for t in report["tally"]}
    assert tally[info.shas[0]]["sightings"] == 0 and tally[info.shas[-1]]["runs"] >= 1
    with sqlite3.connect(store) as conn:
        finished = json.loads(conn.execute("SELECT extra FROM runs WHERE run_id = ?", (bisect_id,)).fetchone()[0])
    steps = finished["bisect"]["state"]["steps"]
    assert steps[:runs_before] == saved["bisect"]["state"]["steps"]     # nothing done twice, nothing lost
    assert report["runs"] == sum(t["runs"] for t in report["tally"])


def test_bisect_refuses_bad_input(tmp_path):
    info = make_kernel_repo(tmp_path / "kpkg", n_commits=3)
    case = tmp_path / "case.yaml"
    case.write_text(info.case_yaml)
    base = ["bisect", str(case), "--repo", str(info.path), "--no-store", "--worktree-cache", str(tmp_path / "wt")]
    for extra, needle in ((["--good=-x", "--bad", "main"], "starts with '-'"),
                          (["--good", info.shas[2], "--bad", info.shas[0]], "not an ancestor"),
                          (["--good", "main", "--bad", "main"], "same commit"),
                          (["--good", info.shas[0]], "needs --bad"),
                          (["--good", info.shas[0], "--bad", "main", "--signature", "WRONG"], "not an outcome")):
        proc = run_harness(*base, *extra, cwd=tmp_path)
        assert proc.returncode == 2, (extra, proc.stdout + proc.stderr)
        assert needle in proc.stderr, (extra, proc.stderr)


def test_git_bisect_run_finds_the_culprit(tmp_path, golden_cache_dir):
    info = make_kernel_repo(tmp_path / "kpkg", n_commits=12, culprit=7, fail_p=1.0)
    case = tmp_path / "case.yaml"
    case.write_text(info.case_yaml)
    git(info.path, "bisect", "start", info.shas[-1], info.shas[0])
    proc = subprocess.run(
        ["git", "bisect", "run", sys.executable, "-m", "harness", "bisect-run", str(case), "--kernel-path", "python",
         "--no-store", "--golden-cache", str(golden_cache_dir), "--log-dir", str(tmp_path / "logs")],
        cwd=info.path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{info.culprit_sha} is the first bad commit" in proc.stdout


@pytest.mark.parametrize("kernel, args, code", [
    ("segfault", [], 1),                            # a crash is a result: bad
    ("hang", ["--signature", "MISMATCH"], 125),     # another failure, nothing clean: skip
    ("reference", ["--signature", "MISMATCH"], 0),
    ("reference", ["--no-such-flag"], 125),         # bad usage must not abort git bisect
    ("reference", ["--build", "exit 3"], 125),      # a failing build: skip
    ("reference", ["--signature", "NOPE"], 125),
])
def test_bisect_run_exits_only_0_1_or_125(tmp_path, golden_cache_dir, kernel, args, code):
    case = tmp_path / "case.yaml"
    case.write_text(f"name: br\nop: rope_kv_write\nkernel: {kernel}\ngeometry: tiny\nseq_lens: \"const(1)\"\n"
                    f"timeout_s: 2\n")
    proc = run_harness("bisect-run", str(case), "--no-store", "--golden-cache", str(golden_cache_dir),
                       "--log-dir", str(tmp_path / "logs"), *args, cwd=tmp_path)
    assert proc.returncode == code, proc.stdout + proc.stderr
