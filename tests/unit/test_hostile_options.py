"""Run defaults that must not collide or litter (issue 13, items 10 and 12, and issue 12's leftover):
a log directory per run, the golden cache resolved up front, no reports/ in a kernel checkout."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.devices import parse_device
from harness.run import options

CPU = (parse_device("cpu"),)


def test_two_runs_in_the_same_second_get_their_own_log_directories(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dirs = {options.run_options(options.Settings(devices=CPU)).worker.log_dir for _ in range(50)}
    assert len(dirs) == 50
    assert all(d.parent == tmp_path / "reports" / "logs" for d in dirs)


def test_two_processes_started_together_get_their_own_log_directories(tmp_path):
    code = ("from harness.run import options; from harness.devices import parse_device; "
            "print(options.run_options(options.Settings(devices=(parse_device('cpu'),))).worker.log_dir)")
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert outs[0] != outs[1] and all(outs)


def test_a_named_log_directory_is_shared(tmp_path, monkeypatch):
    """pytest-xdist workers name it by the run id their controller chose, so they share one."""
    monkeypatch.chdir(tmp_path)
    a, b = (options.run_options(options.Settings(devices=CPU, log_prefix="pytest-", log_name="RUN1", log_subdir=w))
            for w in ("gw0", "gw1"))
    assert a.worker.log_dir.parent == b.worker.log_dir.parent == tmp_path / "reports" / "logs" / "pytest-RUN1"


def test_a_relative_golden_cache_is_resolved_before_any_kernel_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = options.run_options(options.Settings(devices=CPU, golden_cache="goldens"))
    assert run.worker.golden_cache == str(tmp_path / "goldens")
    assert options.run_options(options.Settings(devices=CPU, golden_cache="")).worker.golden_cache == ""


def _git_init(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def test_a_kernel_checkout_gets_no_reports_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("HARNESS_STORE", raising=False)
    kernels = _git_init(tmp_path / "mykernels")
    (kernels / "src").mkdir()
    monkeypatch.chdir(kernels / "src")
    state = options.repo_state_dir(kernels)
    assert options.foreign_checkout_state() == state
    assert options.store_path(None) == str(state / "results.sqlite")
    assert options.run_options(options.Settings(devices=CPU)).worker.log_dir.parent == state / "logs"
    assert not (kernels / "reports").exists() and not (kernels / "src" / "reports").exists()
    assert options.store_path("mine.sqlite") == "mine.sqlite"          # a flag still wins


def test_a_harness_project_checkout_keeps_reports_here(tmp_path, monkeypatch):
    monkeypatch.delenv("HARNESS_STORE", raising=False)
    project = _git_init(tmp_path / "project")
    (project / "cases").mkdir()
    monkeypatch.chdir(project)
    assert options.foreign_checkout_state() is None
    assert options.store_path(None) == "reports/results.sqlite"
    other = _git_init(tmp_path / "other")
    (other / "reports").mkdir()                                        # chosen before: kept
    monkeypatch.chdir(other)
    assert options.foreign_checkout_state() is None
    monkeypatch.chdir(tmp_path)                                        # not a checkout
    assert options.foreign_checkout_state() is None


def test_the_harness_checkout_is_its_own_project(monkeypatch):
    monkeypatch.chdir(Path(options.__file__).resolve().parents[2])
    assert options.foreign_checkout_state() is None
