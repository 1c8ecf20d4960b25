"""The generated kernel-library repositories (tests/gitrepo.py) behave as designed."""
from __future__ import annotations

import importlib
import json
import random
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import replace

import pytest
import torch

from harness import goldens
from gitrepo import BUILD_STAMP, RAISE_TEXT, SEED_ENV, git, make_kernel_repo
from harness.worker import checks
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.worker.inputs import generate
from harness.worker.launch import launch
from harness.outcomes import Outcome
from harness.refs import Worktrees
from helpers import run_harness, write_case_file


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_kernel_repo(tmp_path_factory.mktemp("kpkg") / "repo", n_commits=6, culprit=3, fail_p=1.0,
                            broken_build=1, raises=4)


@pytest.fixture(scope="module")
def worktrees(repo, tmp_path_factory):
    with Worktrees(repo.path, tmp_path_factory.mktemp("wt-cache")) as wts:
        yield wts


@contextmanager
def kpkg_from(python_dir):
    """``kpkg.kernel`` imported from ``python_dir``; sys.path and sys.modules restored afterwards."""
    def purge():
        for name in [m for m in sys.modules if m == "kpkg" or m.startswith("kpkg.")]:
            del sys.modules[name]
    sys.path.insert(0, str(python_dir))
    purge()
    try:
        yield importlib.import_module("kpkg.kernel")
    finally:
        sys.path.remove(str(python_dir))
        purge()


def run_case(kernel) -> Outcome:
    case = Case(case_id="t", matrix="t", source="t", op="rope_kv_write", kernel="kpkg.kernel:rope_kv_write",
                geometry=replace(PRESETS["tiny"], batch=4), seq_lens=SeqLens("const", (1,)),
                slot_mode=SlotMode("arange"), seed=0)
    ci = generate(case)
    launched = launch(kernel, ci, torch.device("cpu"), lambda: None)
    return checks.run_checks(case, ci, goldens.compute(case.op, ci.args), launched).outcome


def test_same_arguments_give_the_same_shas(tmp_path, repo):
    again = make_kernel_repo(tmp_path / "again", n_commits=6, culprit=3, fail_p=1.0, broken_build=1, raises=4)
    assert again.shas == repo.shas and len(set(again.shas)) == 6
    assert git(repo.path, "rev-list", "--reverse", "main").split() == repo.shas
    other = make_kernel_repo(tmp_path / "other", n_commits=6, culprit=2, fail_p=1.0, broken_build=1, raises=4)
    assert other.shas[:2] == repo.shas[:2] and other.shas[2] != repo.shas[2]
    assert repo.culprit_sha == repo.shas[3] and repo.broken_build_sha == repo.shas[1]
    assert repo.raises_sha == repo.shas[4] and repo.head == repo.shas[-1]


def test_kernel_passes_before_the_culprit_and_fails_from_it(repo, worktrees):
    outcomes = {}
    for i in (0, 2, 3, 5):
        with kpkg_from(worktrees.materialize(repo.shas[i]).path / "python") as mod:
            outcomes[i] = run_case(mod.rope_kv_write)
    assert outcomes == {0: Outcome.PASS, 2: Outcome.PASS, 3: Outcome.MISMATCH, 5: Outcome.MISMATCH}
    with kpkg_from(worktrees.materialize(repo.raises_sha).path / "python") as mod, \
            pytest.raises(RuntimeError, match=RAISE_TEXT):
        run_case(mod.rope_kv_write)


def test_flake_stream_is_reproducible_and_seeded_by_env(tmp_path, monkeypatch):
    info = make_kernel_repo(tmp_path / "repo", n_commits=2, culprit=1, fail_p=0.5, seed=7)
    with Worktrees(info.path, tmp_path / "cache") as wts:
        python_dir = wts.materialize(info.head).path / "python"
        with kpkg_from(python_dir) as mod:
            monkeypatch.delenv(SEED_ENV, raising=False)
            default = [mod.corrupts(i) for i in range(64)]
            assert default == [random.Random(f"7:{i}").random() < 0.5 for i in range(64)]
            assert 0 < sum(default) < 64
            monkeypatch.setenv(SEED_ENV, "other")
            assert [mod.corrupts(i) for i in range(64)] != default
        with kpkg_from(wts.materialize(info.shas[0]).path / "python") as mod:
            assert not any(mod.corrupts(i) for i in range(64))


def test_build_script_fails_only_at_the_broken_commit(repo, worktrees, tmp_path):
    codes = {}
    for i in (0, 1, 2):
        path = worktrees.materialize(repo.shas[i]).path
        codes[i] = subprocess.run(["sh", "build.sh"], cwd=path, capture_output=True, timeout=30,
                                  check=False).returncode
        assert (path / BUILD_STAMP).exists() == (codes[i] == 0)
        assert not git(path, "status", "--porcelain")     # the stamp is ignored, the tree stays clean
    assert codes == {0: 0, 1: 3, 2: 0}


def test_harness_cli_runs_the_kernel_from_a_worktree(repo, worktrees, tmp_path, golden_cache_dir):
    cases = write_case_file(tmp_path / "cases", "kpkg.yaml", repo.case_yaml)
    out = tmp_path / "out.json"
    python_dir = worktrees.materialize(repo.culprit_sha).path / "python"
    proc = run_harness("run", str(cases), "--device", "cpu", "--json", str(out), "--no-store",
                       "--golden-cache", str(golden_cache_dir), "--log-dir", str(tmp_path / "logs"),
                       cwd=tmp_path, timeout=240, env={"PYTHONPATH": str(python_dir)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [result] = json.loads(out.read_text())["results"]
    assert result["outcome"] == "MISMATCH" and result["case_id"] == "kpkg-rope"
