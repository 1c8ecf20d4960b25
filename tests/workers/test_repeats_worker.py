"""Repeats reuse their inputs in a real device worker: a fixed-seed hunt through the engine reuses
from its second iteration on, with the same verdicts and bits; HARNESS_REUSE_INPUTS=0 turns it off."""
from __future__ import annotations

from dataclasses import replace

import pytest

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device
from harness.flake import hunt as flake
from harness.outcomes import Outcome
from harness.run.engine import Engine, RunOptions
from harness.run.spawn import WorkerOptions


def make_case(**kw) -> Case:
    base = dict(case_id="fused", matrix="t", source="test", op="fused_rope_decode_attention", kernel="reference",
                geometry=replace(PRESETS["tiny"], batch=4), seq_lens=SeqLens("multi_block"),
                slot_mode=SlotMode("padded", 0.25), seed=3, timeout_s=60.0)
    base.update(kw)
    return Case(**base)


@pytest.fixture
def engine(tmp_path):
    options = RunOptions(devices=[Device("cpu")],
                         worker=WorkerOptions(log_dir=tmp_path / "logs", golden_cache=str(tmp_path / "goldens")))
    with Engine(options) as e:
        yield e


def hunt(engine, case, n=3):
    results = sorted(engine.run(flake.plan([case], flake.HuntOptions(repeat=n))), key=lambda r: r.repeat)
    assert [r.outcome for r in results] == [Outcome.PASS] * n, [r.summary for r in results]
    return results


def test_a_fixed_seed_hunt_reuses_its_inputs_from_the_second_iteration(engine):
    results = hunt(engine, make_case())
    assert [r.metrics["inputs_reused"] for r in results] == [False, True, True]
    assert all(r.metrics["inputs_kept_bytes"] > 0 for r in results)
    assert len({r.metrics["inputs_digest"] for r in results}) == 1
    assert [r.metrics["determinism"]["identical"] for r in results] == [True, True, True]


def test_the_switch_off_in_the_workers_environment_generates_every_time(engine):
    off = hunt(engine, make_case(env={"HARNESS_REUSE_INPUTS": "0"}))
    on = hunt(engine, make_case())
    assert [r.metrics["inputs_reused"] for r in off] == [False, False, False]
    assert [r.metrics["inputs_kept_bytes"] for r in off] == [0, 0, 0]
    assert [r.metrics["inputs_digest"] for r in off] == [r.metrics["inputs_digest"] for r in on]
    assert [r.metrics["determinism"]["digests"] for r in off] == [r.metrics["determinism"]["digests"] for r in on]


def test_fresh_seeds_never_reuse(engine):
    results = engine.run(flake.plan([make_case()], flake.HuntOptions(repeat=3, seeds="fresh")))
    assert [r.metrics["inputs_reused"] for r in results] == [False, False, False]
