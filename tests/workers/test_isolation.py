"""``--isolation case`` (issue 37, item 1): every case runs in a fresh worker, so nothing a kernel does
to its own process reaches the next case, whether or not a hygiene check sees it.  Careless kernels,
each followed by clean cases and mutant controls: every clean case passes, every mutant is a MISMATCH."""
from __future__ import annotations

import os

import pytest

from helpers import KERNELS_UNDER_TEST, run_harness, write_case_file
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.cli.parser import build_parser
from harness.devices import Device
from harness.outcomes import Outcome
from harness.run.pool import DeviceWorker
from harness.run.spawn import WorkerOptions

ATTACKS = ("hostile.round3:meta_path_serves_reference", "hostile.isolation:patches_isfinite",
           "hostile.isolation:lowers_hard_nofile", "hostile.isolation:patches_the_loader")
CLEAN = "reference"
MUTANTS = ("skip_rope", "hostile.user_mutant:rope_kv_write")


def case(kernel: str, case_id: str) -> Case:
    return Case(case_id=case_id, matrix="t", source="test", op="rope_kv_write", kernel=kernel,
                geometry=PRESETS["tiny"], seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"), seed=3,
                timeout_s=60.0)


@pytest.fixture(scope="module")
def isolated(tmp_path_factory):
    """Every attack, then two clean cases and both mutant controls, through one isolated DeviceWorker."""
    tmp = tmp_path_factory.mktemp("isolation")
    options = WorkerOptions(log_dir=tmp / "logs", golden_cache=str(tmp / "goldens"),
                            kernel_paths=(str(KERNELS_UNDER_TEST),), isolation="case")
    worker = DeviceWorker(Device("cpu"), options)
    ran: list[tuple[str, str, Outcome, str]] = []
    try:
        for attack in ATTACKS:
            name = attack.rpartition(":")[2]
            for role, kernel in (("attack", attack), ("clean", CLEAN), ("clean", CLEAN),
                                 *(("mutant", m) for m in MUTANTS)):
                result = worker.run(case(kernel, f"{name}-{role}-{len(ran)}"), tmp / f"{len(ran)}.log")
                ran.append((name, role, result.outcome, result.summary))
                assert worker.current is None          # stopped with its case: nothing to carry over
        yield ran, worker.starts
    finally:
        worker.close()


def test_every_clean_case_passes_and_every_mutant_fails_after_each_attack(isolated):
    ran, _ = isolated
    clean = [(name, outcome, summary) for name, role, outcome, summary in ran if role == "clean"]
    mutants = [(name, outcome, summary) for name, role, outcome, summary in ran if role == "mutant"]
    assert all(outcome is Outcome.PASS for _, outcome, _ in clean), clean
    assert all(outcome is Outcome.MISMATCH for _, outcome, _ in mutants), mutants
    assert len(clean) == 2 * len(ATTACKS) and len(mutants) == len(MUTANTS) * len(ATTACKS)


def test_every_case_ran_in_a_worker_of_its_own(isolated):
    ran, starts = isolated
    assert starts >= len(ran)        # one process per case (plus the spare started during the last)


def test_flake_bisect_and_compare_take_the_flag():
    parser = build_parser()
    for argv in (["run"], ["flake", "--repeat", "3"], ["bisect", "--repo", ".", "--good", "a", "--bad", "b"],
                 ["bisect-run"], ["compare", "--repo", ".", "--ref", "a=HEAD", "--ref", "b=HEAD"], ["audit"]):
        assert parser.parse_args([*argv, "--isolation", "case"]).isolation == "case"
        assert parser.parse_args(argv).isolation == "warm"          # the warm default stays the default


def test_the_cli_runs_each_case_in_a_fresh_worker(tmp_path):
    cases = write_case_file(tmp_path, "c.yaml", "op: rope_kv_write\nmatrix:\n  seed: [1, 2, 3]\n")
    logs = tmp_path / "logs"
    done = run_harness("run", str(cases), "--isolation", "case", "--no-store", "--log-dir", str(logs),
                       "--no-golden-cache", cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(list(logs.glob("worker-*.log"))) >= 3


def test_a_flake_hunt_runs_each_iteration_in_a_fresh_worker(tmp_path):
    """flake takes --isolation case too: two iterations of one case, each in a worker of its own."""
    cases = write_case_file(tmp_path, "c.yaml", "op: rope_kv_write\n")
    logs = tmp_path / "logs"
    done = run_harness("flake", str(cases), "--repeat", "2", "--isolation", "case", "--no-store", "--log-dir",
                       str(logs), "--no-golden-cache", cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(list(logs.glob("worker-*.log"))) >= 2


def test_the_pytest_plugin_has_the_option():
    from harness.pytest_plugin import _OPTIONS
    assert any(name == "--harness-isolation" and kwargs["default"] == "warm" for name, _, kwargs in _OPTIONS)
