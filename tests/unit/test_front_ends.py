"""The front ends' shared pieces: --debug, the error families, engine options resolved in one
place, the run lifecycle in the store, the bisect plan as stored."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from harness import trace
from harness.bisect.driver import BisectError, SignatureError
from harness.bisect.search import Conclusion
from harness.bisect.session import BisectPlan, load
from harness.casefiles import CaseFileError, load_paths
from harness.cli import main
from harness.cli.parser import build_parser
from harness.devices import DeviceError, parse_device
from harness.errors import HarnessError, UsageError
from harness.outcomes import Outcome, Result
from harness.refs import RefError
from harness.refs.runner import RefSetup
from harness.run import options
from harness.run.engine import Planned
from harness.run.spawn import WorkerStartError
from harness.run.session import Addendum, recording, resumed
from harness.shard.merge import MergeError
from harness.shard.split import ShardError
from harness.store import MemoryStore, StoreError, StoreOpenError

CASES = Path(__file__).resolve().parents[2] / "cases"
SUBCOMMANDS = ("list", "run", "flake", "compare", "bisect", "bisect-run", "report", "history")


@pytest.fixture
def trace_off():
    """Leave the trace logger as it was found (silent)."""
    handlers, level, propagate = list(trace.log.handlers), trace.log.level, trace.log.propagate
    yield trace.log
    trace.log.handlers[:] = handlers
    trace.log.setLevel(level)
    trace.log.propagate = propagate


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_takes_debug(command):
    extra = ["x"] if command == "history" else []
    args = build_parser().parse_args([command, *extra, "--debug"])
    assert args.debug is True
    assert build_parser().parse_args([command, *extra]).debug is False


def test_debug_enables_the_trace_logger(trace_off, capsys, monkeypatch):
    monkeypatch.delenv("HARNESS_DEBUG", raising=False)
    assert main(["list", str(CASES)]) == 0
    assert not any(getattr(h, "_harness_trace", False) for h in trace_off.handlers)
    assert main(["list", "--debug", str(CASES)]) == 0
    assert trace_off.isEnabledFor(logging.DEBUG)
    trace_off.debug("spawned worker")
    assert "spawned worker" in capsys.readouterr().err


def test_harness_debug_env_enables_the_trace_logger(trace_off, monkeypatch):
    monkeypatch.setenv("HARNESS_DEBUG", "1")
    assert main(["list", str(CASES)]) == 0
    assert trace_off.isEnabledFor(logging.DEBUG)
    assert not trace.enabled_by_env({"HARNESS_DEBUG": "0"})


@pytest.mark.parametrize("error", [CaseFileError, DeviceError, ShardError, MergeError, RefError, BisectError,
                                   SignatureError, StoreOpenError])
def test_the_users_errors_are_usage_errors(error):
    assert issubclass(error, UsageError) and issubclass(error, HarnessError)


@pytest.mark.parametrize("error", [StoreError, WorkerStartError])
def test_harness_failures_are_not_usage_errors(error):
    assert issubclass(error, HarnessError) and not issubclass(error, UsageError)


def test_every_conclusion_describes_itself():
    assert all(c.describe() and c.describe() != c.value for c in Conclusion)


def test_settings_resolve_flag_then_environment_then_default(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_GOLDEN_CACHE", str(tmp_path / "env-cache"))
    monkeypatch.chdir(tmp_path)
    base = options.Settings(devices=(parse_device("cpu"),), kernel_paths=("k",), log_prefix="pytest-",
                            log_subdir="gw1", tier="all", exitfirst=True)
    run = options.run_options(base)
    assert run.worker.golden_cache == str(tmp_path / "env-cache")
    assert run.worker.kernel_paths == (str(tmp_path / "k"),)
    assert run.worker.log_dir.parent.name.startswith("pytest-") and run.worker.log_dir.name == "gw1"
    assert run.run_device_tier_on_cpu and run.exitfirst
    flagged = options.Settings(devices=base.devices, golden_cache=options.golden_cache(str(tmp_path / "flag"), False),
                               log_dir=str(tmp_path / "logs"))
    assert options.run_options(flagged).worker.golden_cache == str(tmp_path / "flag")
    assert options.run_options(flagged).worker.log_dir == tmp_path / "logs"
    assert options.golden_cache(str(tmp_path / "flag"), True) == ""
    assert options.store_path("a.sqlite", {"HARNESS_STORE": "b.sqlite"}) == "a.sqlite"
    assert options.store_path(None, {"HARNESS_STORE": "b.sqlite"}) == "b.sqlite"
    assert options.store_path(None, {}) == str(Path("reports/results.sqlite"))


def test_recording_finishes_the_run_with_the_addendum_also_when_interrupted(tmp_path):
    case = load_paths([str(CASES)])[0]
    store = MemoryStore()
    run = options.run_options(options.Settings(devices=(parse_device("cpu"),), golden_cache="",
                                               log_dir=str(tmp_path)))
    with pytest.raises(KeyboardInterrupt), recording(store, [Planned(0, case)], run, kind="flake") as recorded:
        result = Result(case_id=case.case_id, outcome=Outcome.PASS, summary="ok")
        store.add_result(recorded.run_id, result)
        recorded.results.append(result)
        recorded.addendum = Addendum(summary={"flake": {"x": 1}})
        raise KeyboardInterrupt
    stored = store.run(recorded.run_id)
    assert stored["finished"] is not None and stored["kind"] == "flake"
    assert stored["summary"]["total"] == 1 and stored["summary"]["flake"] == {"x": 1}
    assert [e["case_id"] for e in store.planned_cases(recorded.run_id)] == [case.case_id]


def test_a_bisect_plan_reads_back_as_stored(tmp_path):
    cases = tuple(load_paths([str(CASES)])[:2])
    plan = BisectPlan(setup=RefSetup(repo=tmp_path, build="make", cache_dir=None), devices=("cpu",), tier="ci",
                      kernel_paths=(str(tmp_path),), golden_dtype="fp64", cases=cases, good="v1", bad="v2",
                      first_parent=True)
    assert BisectPlan.from_dict(plan.to_dict()) == plan


def test_resuming_an_unknown_bisect_is_a_usage_error():
    with pytest.raises(UsageError, match="--resume nope: no bisect with that id"):
        load(MemoryStore(), "nope")


def test_resume_options_fall_back_to_the_flags_for_what_an_older_run_lacks():
    flags = options.ResumeOptions(("/k",), "fp32", "auto")
    recorded = options.ResumeOptions(("/old",), "fp64", "all")
    assert options.ResumeOptions.from_dict(recorded.to_dict(), flags) == recorded
    assert options.ResumeOptions.from_dict({}, flags) == flags
    assert options.ResumeOptions.from_dict({"kernel_paths": []}, flags).kernel_paths == ("/k",)


def test_resumed_lists_what_the_run_planned_and_has_no_result_for(tmp_path):
    cases = load_paths([str(CASES)])[:2]
    store = MemoryStore()
    run = options.run_options(options.Settings(devices=(parse_device("cpu"),), golden_cache="",
                                               log_dir=str(tmp_path)))
    kept = options.ResumeOptions(("/k",), "fp64", "all")
    with recording(store, [Planned(i, c) for i, c in enumerate(cases)], run,
                   extra={"options": kept.to_dict()}) as recorded:
        store.add_result(recorded.run_id, Result(case_id=cases[0].case_id, outcome=Outcome.PASS, summary="ok"))
    resume = resumed(store, recorded.run_id, options.ResumeOptions())
    assert [p.case.case_id for p in resume.planned] == [cases[1].case_id]
    assert resume.options == kept and resume.devices == ("cpu",) and resume.shard is None
    with pytest.raises(UsageError, match="--resume nope: no such run"):
        resumed(store, "nope", options.ResumeOptions())
