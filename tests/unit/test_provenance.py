"""Provenance: env filtering, CANN version files, git revisions."""
from __future__ import annotations

import subprocess

from harness.provenance import cann_version, git_revision, kernel_origin, relevant_env, run_provenance


def test_relevant_env_keeps_what_changes_a_kernel():
    env = {"PTO2_RING_HEAP": "1", "HOME": "/root", "PYTHONPATH": "/x", "ASCEND_HOME_PATH": "/a", "TERM": "x"}
    assert relevant_env(env) == {"ASCEND_HOME_PATH": "/a", "PTO2_RING_HEAP": "1", "PYTHONPATH": "/x"}


def test_cann_version_from_the_toolkit_files(tmp_path):
    (tmp_path / "version.cfg").write_text("# comment\nversion=8.0.RC3\n")
    assert cann_version({"ASCEND_HOME_PATH": str(tmp_path)}) == "8.0.RC3"
    assert cann_version({"ASCEND_HOME_PATH": str(tmp_path / "missing")}) in (None, cann_version({}))


def test_git_revision_of_a_checkout(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "k.py").write_text("x = 1\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "k.py"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm",
                    "first kernel"], check=True)
    rev = git_revision(tmp_path / "k.py")
    assert rev["subject"] == "first kernel" and len(rev["sha"]) == 40 and rev["dirty"] is False
    (tmp_path / "k.py").write_text("x = 2\n")
    assert git_revision(tmp_path)["dirty"] is True
    assert kernel_origin(str(tmp_path / "k.py"))["git"]["sha"] == rev["sha"]
    assert git_revision(tmp_path.parent / "nonexistent-dir-xyz") is None


def test_run_provenance_names_the_harness():
    prov = run_provenance()
    assert prov["harness_version"] and prov["python"] and "env" in prov
