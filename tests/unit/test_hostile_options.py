"""Run defaults that must not collide, litter or pass falsely (issue 13, items 10-12, issue 12's leftover):
a log directory per run, the golden cache resolved up front, no reports/ in a kernel checkout,
no green run on an absent accelerator."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


# -- absent accelerators (item 11) --------------------------------------------------

def _cuda_present() -> bool:
    import torch
    return torch.cuda.is_available()


def test_cpu_needs_no_probe(monkeypatch):
    monkeypatch.setattr(options.subprocess, "run", lambda *a, **k: pytest.fail("probed for cpu"))
    assert options.absent_devices(CPU) == {}
    options.require_present(CPU, allow_absent=False)


def test_an_absent_accelerator_is_a_usage_error_unless_allowed():
    if _cuda_present():
        pytest.skip("CUDA is present here")
    from harness.devices import DeviceError, parse_device_list
    devices = parse_device_list("cpu,cuda:0,npu:3")
    absent = options.absent_devices(devices)
    assert set(map(str, absent)) == {"cuda:0", "npu:3"}
    with pytest.raises(DeviceError, match=r"^cuda:0 not present: .*\(and 1 more\); --allow-absent-devices runs anyway"):
        options.require_present(devices, allow_absent=False)
    options.require_present(devices, allow_absent=True)      # the skips are asked for


@pytest.mark.parametrize("field, flag", [("rules", "--rules"), ("kernel_paths", "--kernel-path")])
def test_a_fifo_as_a_path_setting_is_refused_for_both_front_ends(tmp_path, field, flag):
    """The pytest plugin resolves its --harness-* paths through the same Settings (issue 37, item 6)."""
    from harness.devices import Device
    from harness.errors import UsageError
    from harness.run import options as run_options
    os.mkfifo(tmp_path / "fifo")
    settings = run_options.Settings(devices=(Device("cpu"),), log_dir=str(tmp_path / "logs"),
                                    **{field: (str(tmp_path / "fifo"),)})
    import threading
    raised: list[BaseException] = []

    def resolve() -> None:
        try:
            run_options.run_options(settings)
        except BaseException as exc:       # noqa: BLE001 - checked below
            raised.append(exc)

    thread = threading.Thread(target=resolve, daemon=True)     # unchecked, the read of a FIFO never returns
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), f"{flag} naming a FIFO hung"
    assert len(raised) == 1 and isinstance(raised[0], UsageError), raised
    assert f"{flag} {tmp_path / 'fifo'}: is a FIFO" in str(raised[0])
