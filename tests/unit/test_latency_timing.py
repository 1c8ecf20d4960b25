"""The worker's timing loop (harness/worker/timing.py) and a timed case in process (execute_case)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from harness.case import PRESETS, Case, LatencySpec, SeqLens, SlotMode
from harness.devices import Device, backend
from harness.goldens.cache import GoldenCache
from harness.worker.execute import KernelLoader, execute_case
from harness.worker.timing import time_kernel

CPU = Device("cpu")


class FakeClock:
    """Time that moves only when the fake timer says so: the stopping rule, not the machine, is tested."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeTimer:
    method = "fake"

    def __init__(self, clock: FakeClock, durations):
        self.clock, self.durations = clock, iter(durations)

    def start(self) -> None:
        pass

    def stop(self) -> float:
        d = next(self.durations)
        self.clock.now += d
        return d


def _calls(clock, each=1e-3):
    def call():
        clock.now += 0.0          # the call's time is the timer's
    return call


def test_steady_samples_stop_at_the_target():
    clock = FakeClock()
    timer = FakeTimer(clock, [1e-3] * 100_000)
    spec = LatencySpec(warmup_s=0.0, target=0.02, budget_s=10.0, min_samples=10)
    got = time_kernel(_calls(clock), timer, spec, clock=clock)
    assert got.stopped_by == "target" and got.rel_noise == 0.0 and got.median_s == 1e-3
    assert len(got.samples_s) < 100          # checked about every 20 ms of samples, not run to the cap


def test_noisy_samples_stop_at_the_budget_and_say_the_noise():
    clock = FakeClock()
    wild = [1e-3 * (1 + 9 * (i % 2)) for i in range(100_000)]     # 1 ms and 10 ms, alternately
    spec = LatencySpec(warmup_s=0.0, target=0.02, budget_s=1.0, min_samples=10)
    got = time_kernel(_calls(clock), FakeTimer(clock, wild), spec, clock=clock)
    assert got.stopped_by == "budget" and got.rel_noise > 0.5
    assert 1.0 <= sum(got.samples_s) < 1.2


def test_restore_and_flush_run_before_every_sample():
    clock, order = FakeClock(), []
    timer = FakeTimer(clock, [1e-3] * 1000)
    spec = LatencySpec(warmup_s=0.0, min_samples=10, max_samples=12, target=0.0)
    got = time_kernel(lambda: order.append("call"), timer, spec, flush=lambda: order.append("flush"),
                      restore=lambda: order.append("restore"), clock=clock)
    assert len(got.samples_s) == 12 and got.stopped_by == "max_samples" and got.cold
    assert order[:1] == ["call"] and order[1:4] == ["restore", "flush", "call"]


def make_case(kernel="reference", **kw) -> Case:
    base = dict(case_id="t", matrix="t", source="t", op="paged_decode_attention", kernel=kernel,
                geometry=replace(PRESETS["tiny"], batch=2), seq_lens=SeqLens("const", (40,)),
                slot_mode=SlotMode("arange"), seed=5,
                latency=LatencySpec(warmup_s=0.01, budget_s=0.2, target=0.05))
    base.update(kw)
    return Case(**base)


@pytest.fixture
def run_case(tmp_path):
    cache, loader = GoldenCache(tmp_path / "goldens"), KernelLoader()
    return lambda case: execute_case(case, CPU, backend(CPU), cache, loader)


def test_a_passing_case_is_timed_with_its_derived_figures(run_case):
    reply = run_case(make_case())
    lat = reply.metrics["latency"]
    assert reply.outcome.passed and lat["measured"] and lat["method"] == "process_time_ns" and not lat["cold"]
    assert lat["samples"] == len(lat["samples_s"]) >= 10
    assert lat["ci_low_s"] <= lat["median_s"] <= lat["ci_high_s"]
    # the KV rows the two sequences attend: 2 x 40 tokens x (K and V) x 2 kv heads x 32 x bf16
    assert lat["bytes"] >= 2 * 40 * 2 * 2 * 32 * 2 and lat["gb_per_s"] > 0 and lat["flops"] == 4 * 4 * 32 * 80
    assert "fraction_of_peak" not in lat            # the host has no peak in the table


def test_a_failing_case_is_not_timed_and_says_so(run_case, monkeypatch):
    from helpers import ROOT
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "kernels_under_test"))
    reply = run_case(make_case(kernel="classic_bugs.kernels:off_by_one_page"))
    assert not reply.outcome.passed
    assert reply.metrics["latency"] == {"measured": False,
                                        "why": "the case failed its checks: latency is measured for correct results only"}


def test_no_latency_unless_asked(run_case):
    assert "latency" not in run_case(make_case(latency=None)).metrics


def test_the_spec_crosses_the_wire():
    case = make_case()
    assert Case.from_wire(case.to_wire()) == case
    old = case.to_wire()
    del old["latency"]                                # a wire form stored before latency existed
    assert Case.from_wire(old).latency is None
