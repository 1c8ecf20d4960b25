"""Real device-worker processes: warm reuse, timeouts, crashes, replacement, env, absent devices.

Every wait is bounded (timeout_s on the cases, the engine's own kill path).
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device
from harness.run.engine import Engine, Planned, RunOptions
from harness.outcomes import Outcome
from harness.run.pool import DeviceWorker
from harness.run.spawn import WorkerOptions


def make_case(op="rope_kv_write", kernel="reference", **kw) -> Case:
    base = dict(case_id=f"{op}-{kernel}", matrix="t", source="test", op=op, kernel=kernel,
                geometry=PRESETS["tiny"], seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"),
                seed=3, timeout_s=60.0)
    base.update(kw)
    return Case(**base)


@pytest.fixture
def options(tmp_path) -> WorkerOptions:
    return WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "goldens"))


@pytest.fixture
def worker(options):
    w = DeviceWorker(Device("cpu"), options)
    yield w
    w.close()


def test_worker_is_warm_across_cases_and_runs_in_another_process(worker, tmp_path):
    first = worker.run(make_case(case_id="a"), tmp_path / "a.log")
    pid = worker.proc.pid
    second = worker.run(make_case(case_id="b", seed=4), tmp_path / "b.log")
    assert (first.outcome, second.outcome) == (Outcome.PASS, Outcome.PASS)
    assert worker.proc.pid == pid != os.getpid()
    assert worker.starts == 1


def test_hang_is_killed_dumps_stacks_and_next_case_gets_a_fresh_worker(worker, tmp_path):
    log = tmp_path / "hang.log"
    hung = worker.run(make_case(kernel="hang", case_id="h", timeout_s=1.5), log)
    assert hung.outcome is Outcome.HANG
    assert hung.sticky
    assert "timeout_s=1.5" in hung.summary
    text = log.read_text()
    assert "Thread" in text or "Current thread" in text, text  # faulthandler's stack dump
    assert "hang" in text                                        # the mutant's frame is in it
    after = worker.run(make_case(case_id="after"), tmp_path / "after.log")
    assert after.outcome is Outcome.PASS
    assert worker.replacements == 1


def test_segfault_is_a_crash_with_its_signal_and_the_run_goes_on(worker, tmp_path):
    crashed = worker.run(make_case(kernel="segfault", case_id="s"), tmp_path / "s.log")
    assert crashed.outcome is Outcome.CRASH
    assert crashed.code == "SIGSEGV"
    assert "Fatal Python error" in Path(crashed.log).read_text()
    assert worker.run(make_case(case_id="next"), tmp_path / "n.log").outcome is Outcome.PASS


def test_missing_kernel_module_is_a_build_error_not_fatal(worker, tmp_path):
    broken = worker.run(make_case(kernel="no_such_pkg.mod:fn", case_id="m"), tmp_path / "m.log")
    assert broken.outcome is Outcome.BUILD_ERROR
    assert "no_such_pkg" in broken.summary
    assert worker.run(make_case(case_id="ok"), tmp_path / "ok.log").outcome is Outcome.PASS
    assert worker.starts == 1   # not sticky: same worker


def test_case_env_is_set_in_the_worker_and_restarts_it(worker, tmp_path):
    worker.run(make_case(case_id="plain"), tmp_path / "p.log")
    worker.run(make_case(case_id="env", env={"PTO2_RING_HEAP": "1024"}), tmp_path / "e.log")
    assert worker.starts == 2
    worker.run(make_case(case_id="env2", env={"PTO2_RING_HEAP": "1024"}), tmp_path / "e2.log")
    assert worker.starts == 2


def test_absent_device_gives_skipped_with_reason(options, tmp_path):
    w = DeviceWorker(Device("npu", 3), options)
    try:
        r = w.run(make_case(), tmp_path / "x.log")
    finally:
        w.close()
    assert r.outcome is Outcome.SKIPPED
    assert "torch-npu" in r.summary or "NPU" in r.summary


def test_engine_keeps_one_result_per_case_through_faults(options):
    cases = [
        make_case(case_id="ok1"),
        make_case(kernel="segfault", case_id="crash"),
        make_case(case_id="ok2", op="paged_decode_attention"),
        make_case(kernel="hang", case_id="hang", timeout_s=1.0),
        make_case(case_id="ok3", op="fused_rope_decode_attention"),
    ]
    cases[2:2] = [make_case(kernel="oom", case_id="oom"), make_case(kernel="abort", case_id="abort"),
                  make_case(kernel="npu_fault", case_id="npu"), make_case(kernel="native_hang", case_id="nh",
                                                                          timeout_s=1.0)]
    with Engine(RunOptions(devices=[Device("cpu")], worker=options)) as engine:
        results = engine.run([Planned(i, c) for i, c in enumerate(cases)])
        replacements = engine.workers[0].replacements
    assert [r.case_id for r in results] == [c.case_id for c in cases]
    assert [r.outcome for r in results] == [
        Outcome.PASS, Outcome.CRASH, Outcome.OOM, Outcome.CRASH, Outcome.DEVICE_FAULT, Outcome.HANG,
        Outcome.PASS, Outcome.HANG, Outcome.PASS]
    assert replacements == 5          # segfault, abort, device fault, two hangs; not the OOM


def test_device_tier_is_skipped_on_cpu_unless_asked(options):
    case = make_case(tier="device")
    with Engine(RunOptions(devices=[Device("cpu")], worker=options)) as engine:
        assert engine.run_one(case).outcome is Outcome.SKIPPED
    with Engine(RunOptions(devices=[Device("cpu")], worker=options, run_device_tier_on_cpu=True)) as engine:
        assert engine.run_one(case).outcome is Outcome.PASS


def test_kernel_path_reaches_the_worker(tmp_path, options):
    pkg = tmp_path / "userlib" / "mykern"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text(
        "from harness.kernels.reference import rope_kv_write as _ref\n"
        "def rope(**kw):\n    return _ref(**kw)\n"
    )
    opts = replace(options, kernel_paths=(str(tmp_path / "userlib"),))
    w = DeviceWorker(Device("cpu"), opts)
    try:
        r = w.run(make_case(kernel="mykern.ops:rope"), tmp_path / "k.log")
    finally:
        w.close()
    assert r.outcome is Outcome.PASS, r.summary


def test_native_hang_that_ignores_sigterm_is_killed(worker, tmp_path):
    log = tmp_path / "native.log"
    hung = worker.run(make_case(kernel="native_hang", case_id="nh", timeout_s=1.0), log)
    assert hung.outcome is Outcome.HANG
    assert "native_hang" in log.read_text()          # faulthandler reached it inside pause()
    assert worker.run(make_case(case_id="after"), tmp_path / "a.log").outcome is Outcome.PASS


def test_abort_is_a_crash_with_sigabrt(worker, tmp_path):
    crashed = worker.run(make_case(kernel="abort", case_id="ab"), tmp_path / "ab.log")
    assert (crashed.outcome, crashed.code) == (Outcome.CRASH, "SIGABRT")


def test_bounded_allocation_is_oom_and_keeps_the_worker(worker, tmp_path):
    oom = worker.run(make_case(kernel="oom", case_id="oom"), tmp_path / "oom.log")
    assert oom.outcome is Outcome.OOM, oom.summary
    assert not oom.sticky
    assert worker.run(make_case(case_id="after"), tmp_path / "a.log").outcome is Outcome.PASS
    assert worker.replacements == 0


def test_emulated_npu_fault_names_the_root_cause_and_replaces_the_worker(worker, tmp_path):
    fault = worker.run(make_case(kernel="npu_fault", case_id="npu"), tmp_path / "npu.log")
    assert fault.outcome is Outcome.DEVICE_FAULT and fault.sticky
    assert "FAIL_507018" in fault.metrics.get("secondary", [])
    assert worker.run(make_case(case_id="after"), tmp_path / "a.log").outcome is Outcome.PASS
    assert worker.replacements == 1


def test_spare_worker_makes_the_second_replacement_immediate(worker, tmp_path):
    worker.run(make_case(kernel="segfault", case_id="s1"), tmp_path / "s1.log")
    worker.run(make_case(case_id="ok"), tmp_path / "ok.log")       # fresh worker; a spare starts
    assert worker.spare is not None
    spare_pid = worker.spare.proc.pid
    worker.run(make_case(kernel="segfault", case_id="s2"), tmp_path / "s2.log")
    assert worker.run(make_case(case_id="ok2"), tmp_path / "ok2.log").outcome is Outcome.PASS
    assert worker.proc.pid == spare_pid


@pytest.mark.parametrize("fork", [True, False], ids=["forked-from-zygote", "spawned"])
def test_both_ways_of_starting_a_worker_survive_faults_and_see_kernel_paths(tmp_path, options, fork):
    """cpu workers fork from the preloaded zygote; accelerator workers are spawned fresh."""
    pkg = tmp_path / "userlib" / "mykern2"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import os\nfrom harness.kernels.reference import rope_kv_write as _ref\n"
                                     "def rope(**kw):\n    assert os.environ['MY_FLAG'] == 'on'\n    return _ref(**kw)\n")
    opts = replace(options, kernel_paths=(str(tmp_path / "userlib"),), fork_cpu_workers=fork)
    w = DeviceWorker(Device("cpu"), opts)
    try:
        ok = w.run(make_case(kernel="mykern2:rope", case_id="k", env={"MY_FLAG": "on"}), tmp_path / "k.log")
        pid = w.proc.pid
        crash = w.run(make_case(kernel="segfault", case_id="s", env={"MY_FLAG": "on"}), tmp_path / "s.log")
        hang = w.run(make_case(kernel="hang", case_id="h", timeout_s=1.0, env={"MY_FLAG": "on"}), tmp_path / "h.log")
        after = w.run(make_case(kernel="mykern2:rope", case_id="a", env={"MY_FLAG": "on"}), tmp_path / "a.log")
    finally:
        w.close()
    assert ok.outcome is Outcome.PASS, ok.summary
    assert (crash.outcome, crash.code) == (Outcome.CRASH, "SIGSEGV")
    assert hang.outcome is Outcome.HANG
    assert "most recent call first" in (tmp_path / "h.log").read_text()     # faulthandler's stack dump
    assert after.outcome is Outcome.PASS and w.replacements == 2 and pid != os.getpid()


@pytest.mark.parametrize("fork", [True, False], ids=["forked-from-zygote", "spawned"])
def test_workers_let_idle_openmp_threads_sleep(tmp_path, options, fork, monkeypatch):
    # spinning OpenMP threads of the worker and the golden process took the cores the
    # working ones needed (25-30x slower integer sums on a loaded 2-core host)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    pkg = tmp_path / "userlib" / "ompkern"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import os\nfrom harness.kernels.reference import rope_kv_write as _ref\n"
                                     "def rope(**kw):\n    assert os.environ['OMP_WAIT_POLICY'] == 'PASSIVE'\n"
                                     "    return _ref(**kw)\n")
    w = DeviceWorker(Device("cpu"), replace(WorkerOptions(log_dir=tmp_path / "logs"),
                                            kernel_paths=(str(tmp_path / "userlib"),), fork_cpu_workers=fork))
    try:
        assert w.run(make_case(kernel="ompkern:rope", case_id="k"), tmp_path / "k.log").outcome is Outcome.PASS
    finally:
        w.close()


def test_a_users_openmp_wait_policy_wins(tmp_path, monkeypatch):
    from harness.run.pool import worker_env
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert worker_env(WorkerOptions(log_dir=tmp_path), {})["OMP_WAIT_POLICY"] == "ACTIVE"
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert worker_env(WorkerOptions(log_dir=tmp_path), {})["OMP_WAIT_POLICY"] == "PASSIVE"
