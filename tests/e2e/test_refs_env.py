"""``--env`` adds to the default ref environment, and ``bisect-run`` writes nothing into the
checkout under test (generated kernel-library repositories, tests/gitrepo.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gitrepo import case_yaml, git, make_kernel_repo
from helpers import ROOT, run_harness


def _compare(tmp_path, info, case, *envs):
    out = tmp_path / "compare.json"
    proc = run_harness("compare", str(case), "--repo", str(info.path), "--ref", f"old={info.shas[0]}",
                       "--ref", f"new={info.shas[-1]}", "--repeat", "1", *(a for e in envs for a in ("--env", e)),
                       "--worktree-cache", str(tmp_path / "wt"), "--golden-cache", str(tmp_path / "goldens"),
                       "--no-store", "--log-dir", str(tmp_path / "logs"), "--json", str(out), cwd=tmp_path)
    return proc, json.loads(out.read_text()) if out.exists() else None


def test_compare_env_adds_to_the_default_pythonpath(tmp_path):
    info = make_kernel_repo(tmp_path / "kpkg", n_commits=2)
    case = tmp_path / "case.yaml"
    # importable from {worktree} itself (python/ as a namespace package): only the default PYTHONPATH finds it
    case.write_text(case_yaml(kernel="python.kpkg.kernel:rope_kv_write"))
    counter = tmp_path / "calls"
    proc, doc = _compare(tmp_path, info, case, "FOO=1", f"KPKG_FLAKE_COUNTER={counter}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["outcome"] for r in doc["results"]] == ["PASS", "PASS"]
    assert counter.read_text() == "2"                  # the variable reached both refs' workers
    for ref in doc["provenance"]["refs"]:
        worktree = ref["env"]["PYTHONPATH"].split(os.pathsep)[0]
        assert git(Path(worktree), "rev-parse", "HEAD") == ref["sha"]      # the ref's own checkout
        assert ref["env"]["FOO"] == "1"
        assert f"env: PYTHONPATH={worktree}" in proc.stdout      # the header shows each ref's env
        assert f"FOO=1 KPKG_FLAKE_COUNTER={counter}" in proc.stdout


def test_compare_explicit_pythonpath_replaces_the_default(tmp_path):
    info = make_kernel_repo(tmp_path / "kpkg", n_commits=2)
    case = tmp_path / "case.yaml"
    case.write_text(info.case_yaml)
    proc, doc = _compare(tmp_path, info, case, "PYTHONPATH={worktree}/python:{PYTHONPATH}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [r["outcome"] for r in doc["results"]] == ["PASS", "PASS"]
    for ref in doc["provenance"]["refs"]:
        elements = ref["env"]["PYTHONPATH"].split(os.pathsep)
        worktree = Path(elements[0]).parent
        assert Path(elements[0]).name == "python" and git(worktree, "rev-parse", "HEAD") == ref["sha"]
        assert str(worktree) not in elements                # the default {worktree} element is gone
        assert f"env: PYTHONPATH={elements[0]}" in proc.stdout


def test_git_bisect_run_leaves_the_checkout_clean(tmp_path):
    info = make_kernel_repo(tmp_path / "kpkg", n_commits=6, culprit=3, fail_p=1.0)
    case = tmp_path / "case.yaml"
    case.write_text(info.case_yaml)
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k not in ("HARNESS_STORE", "PYTHONDONTWRITEBYTECODE")}
    git(info.path, "bisect", "start", info.shas[-1], info.shas[0])
    # no --store, --no-store or --log-dir: the defaults must not land in the checkout
    proc = subprocess.run(
        ["git", "bisect", "run", sys.executable, "-m", "harness", "bisect-run", str(case), "--kernel-path", "python",
         "--golden-cache", str(tmp_path / "goldens")],
        cwd=info.path, capture_output=True, text=True, timeout=600,
        env={**env, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(cache)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{info.culprit_sha} is the first bad commit" in proc.stdout
    assert git(info.path, "status", "--porcelain", "--ignored") == ""      # not even ignored files (__pycache__/)
    (state,) = (cache / "fused-kernel-harness" / "repos").iterdir()
    assert (state / "results.sqlite").is_file() and any((state / "logs").iterdir())
    assert f"stored in {state / 'results.sqlite'}" in proc.stdout


def test_bisect_env_adds_to_the_default_and_each_commit_shows_it(tmp_path):
    info = make_kernel_repo(tmp_path / "kpkg", n_commits=4, culprit=2, fail_p=1.0)
    case = tmp_path / "case.yaml"
    case.write_text(case_yaml(kernel="python.kpkg.kernel:rope_kv_write"))    # found through {worktree} only
    proc = run_harness("bisect", str(case), "--repo", str(info.path), "--good", info.shas[0], "--bad", info.shas[-1],
                       "--env", "FOO=1", "--worktree-cache", str(tmp_path / "wt"), "--golden-cache",
                       str(tmp_path / "goldens"), "--no-store", "--log-dir", str(tmp_path / "logs"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"first bad commit: {info.culprit_sha}" in proc.stdout
    shown = [line for line in proc.stdout.splitlines() if " env: PYTHONPATH=" in line]
    assert shown and all(line.endswith(" FOO=1") for line in shown)
    assert len(shown) == len({line.split()[0] for line in shown})            # once per commit
