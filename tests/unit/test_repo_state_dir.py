"""Where commands run inside the repository under test (``bisect-run``) keep their store and logs."""
from __future__ import annotations

from pathlib import Path

from harness.devices import parse_device
from harness.run import options


def test_repo_state_dir_is_per_repository_under_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    a, b = tmp_path / "x" / "kpkg", tmp_path / "y" / "kpkg"
    state = options.repo_state_dir(a)
    assert state.parent == tmp_path / "cache" / "fused-kernel-harness" / "repos"
    assert state.name.startswith("kpkg-") and state == options.repo_state_dir(a)
    assert options.repo_state_dir(b) != state          # same name, another checkout
    assert not state.is_relative_to(a)


def test_log_root_replaces_reports_logs_and_the_flag_still_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cpu = (parse_device("cpu"),)
    assert options.run_options(options.Settings(devices=cpu)).worker.log_dir.parent == tmp_path / "reports" / "logs"
    rooted = options.run_options(options.Settings(devices=cpu, log_root=tmp_path / "state" / "logs"))
    assert rooted.worker.log_dir.parent == tmp_path / "state" / "logs"
    flagged = options.Settings(devices=cpu, log_dir=str(tmp_path / "mine"), log_root=tmp_path / "state" / "logs")
    assert options.run_options(flagged).worker.log_dir == tmp_path / "mine"
    assert options.store_path(None, {}, default=Path("/s/r.sqlite")) == "/s/r.sqlite"
    assert options.store_path(None, {"HARNESS_STORE": "b.sqlite"}, default=Path("/s/r.sqlite")) == "b.sqlite"
