"""Repeats reuse their inputs (harness/worker/repeats.py), in process: restored buffers are fresh
ones byte for byte, a repeat reports what a fresh run reports, and what a kernel damaged is never reused."""
from __future__ import annotations

import textwrap
from dataclasses import replace

import pytest
import torch

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device, Memory, backend
from harness.goldens.cache import GoldenCache
from harness.memory_plan import keep_fits, plan
from harness.outcomes import Outcome
from harness.worker import repeats as reuse
from harness.worker.determinism import Baselines
from harness.worker.execute import KernelLoader, execute_case
from harness.worker.inputs import generate
from harness.worker.launch import Buffers

CPU = Device("cpu")
PLENTY = Memory(available=10**12, total=10**12)

# Kernels that misbehave on their first call only, then run the reference: whatever they left
# behind must not reach the second call.
FIRST_CALL_ONLY = textwrap.dedent('''
    import torch
    from harness.kernels.reference import fused_rope_decode_attention as reference
    calls = {"n": 0}

    def _first():
        calls["n"] += 1
        return calls["n"] == 1

    def writes_cache(k_cache, slot_mapping, **kw):
        if _first():
            k_cache.view(-1)[:] = 7.0            # every row, valid or not: a CONTRACT finding
        return reference(k_cache=k_cache, slot_mapping=slot_mapping, **kw)

    def writes_input(q_proj, **kw):
        reference(q_proj=q_proj, **kw)
        if _first():
            q_proj.zero_()                       # after computing: only the input guard sees it

    def writes_guard(k_cache, **kw):
        reference(k_cache=k_cache, **kw)
        if _first():                             # the last element of the band before the cache
            torch.as_strided(k_cache, (1,), (1,), k_cache.storage_offset() - 1).fill_(3.0)

    def raises(**kw):
        if _first():
            raise RuntimeError("boom")
        return reference(**kw)
''')


def make_case(kernel="reference", seed=3, **kw) -> Case:
    base = dict(case_id="r", matrix="t", source="t", op="fused_rope_decode_attention", kernel=kernel,
                geometry=replace(PRESETS["tiny"], batch=4), seq_lens=SeqLens("multi_block"),
                slot_mode=SlotMode("padded", 0.25), seed=seed)
    base.update(kw)
    return Case(**base)


@pytest.fixture
def kernels(tmp_path, monkeypatch) -> str:
    """A fresh module of first-call-only kernels (its call counter starts at zero)."""
    name = f"first_call_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(FIRST_CALL_ONLY)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.fixture
def runner(tmp_path):
    cache = GoldenCache(tmp_path / "goldens")

    def run(cases, repeats=None, baseline=None):
        loader, baselines = KernelLoader(), Baselines()
        return [execute_case(c, CPU, backend(CPU), cache, loader, repeat=i, repeats=repeats, baselines=baselines,
                             baseline=str(baseline) if baseline else None)
                for i, c in enumerate(cases)]
    return run


def kept(memory=PLENTY) -> reuse.Repeats:
    return reuse.Repeats("cpu", lambda: (memory, memory))


def test_restored_buffers_are_fresh_ones_byte_for_byte():
    c = make_case()
    ci = generate(c)
    buffers = Buffers.allocate(ci, torch.device("cpu"))
    for buf in buffers.by_name.values():      # a kernel that scribbled over everything, bands included
        buf.storage.view(torch.uint8).random_(0, 256, generator=torch.Generator().manual_seed(1))
    buffers.restore(ci)
    fresh = Buffers.allocate(generate(c), torch.device("cpu"))
    assert buffers.by_name.keys() == fresh.by_name.keys()
    for name, buf in buffers.by_name.items():
        assert torch.equal(buf.storage.view(torch.uint8), fresh.by_name[name].storage.view(torch.uint8)), name


def test_a_repeat_reuses_and_reports_what_a_fresh_run_reports(runner, tmp_path):
    cases = [make_case()] * 3
    reused = runner(cases, kept(), baseline=tmp_path / "a.safetensors")
    fresh = runner(cases, None, baseline=tmp_path / "b.safetensors")
    assert [r.metrics["inputs_reused"] for r in reused] == [False, True, True]
    assert [r.metrics["inputs_reused"] for r in fresh] == [False, False, False]
    assert all(r.metrics["inputs_kept_bytes"] > 0 for r in reused)
    for a, b in zip(reused, fresh):
        assert a.outcome is b.outcome is Outcome.PASS
        assert (a.summary, a.report, a.metrics["inputs_digest"]) == (b.summary, b.report, b.metrics["inputs_digest"])
        assert a.metrics["determinism"]["digests"] == b.metrics["determinism"]["digests"]
        assert a.metrics["determinism"]["identical"] is not False


def test_a_cache_written_on_repeat_1_is_restored_for_repeat_2(runner, kernels):
    first, second = runner([make_case(f"{kernels}:writes_cache")] * 2, kept())
    assert first.outcome is Outcome.CONTRACT, first.summary
    assert second.metrics["inputs_reused"] is True        # nothing the kernel may not write was touched
    assert second.outcome is Outcome.PASS, second.report


@pytest.mark.parametrize("kernel, outcome", [("writes_input", Outcome.CONTRACT), ("writes_guard", Outcome.OOB_WRITE)])
def test_damaged_inputs_or_bands_are_not_reused(runner, kernels, kernel, outcome):
    first, second = runner([make_case(f"{kernels}:{kernel}")] * 2, kept())
    assert first.outcome is outcome, first.summary
    assert second.metrics["inputs_reused"] is False
    assert second.outcome is Outcome.PASS, second.report
    assert second.metrics["inputs_digest"] == first.metrics["inputs_digest"]


def test_a_failed_repeat_drops_what_it_took(runner, kernels):
    # the kernel is not in the key: the same inputs meet another kernel, which fails in its launch
    clean, failed, after = runner([make_case(), make_case(f"{kernels}:raises"), make_case()], kept())
    assert clean.outcome is Outcome.PASS and failed.failure is not None
    assert failed.metrics.get("inputs_reused") is None       # a failure's reply carries no input metrics
    assert after.metrics["inputs_reused"] is False and after.outcome is Outcome.PASS


def test_another_seed_or_golden_dtype_does_not_reuse(runner):
    repeats = kept()
    a, b, c = runner([make_case(seed=3), make_case(seed=4), make_case(seed=3)], repeats)
    assert [r.metrics["inputs_reused"] for r in (a, b, c)] == [False, False, True]   # both kept: memory allows
    assert a.metrics["inputs_digest"] != b.metrics["inputs_digest"]
    assert reuse.key(make_case(), None, "fp32") != reuse.key(make_case(), None, "fp64")


def test_the_switch_turns_reuse_off(runner):
    assert reuse.enabled({}) and reuse.enabled({"HARNESS_REUSE_INPUTS": "1"})
    assert not reuse.enabled({"HARNESS_REUSE_INPUTS": "0"})
    off = reuse.Repeats("cpu", lambda: (PLENTY, PLENTY), on=False)
    assert [r.metrics["inputs_reused"] for r in runner([make_case()] * 2, off)] == [False, False]
    assert off.nbytes == 0


def test_unknown_memory_keeps_only_the_newest_case(runner):
    repeats = kept(memory=None)
    results = runner([make_case(seed=3), make_case(seed=4), make_case(seed=4), make_case(seed=3)], repeats)
    assert [r.metrics["inputs_reused"] for r in results] == [False, False, True, False]


def test_tight_memory_drops_the_oldest_state(runner):
    one = plan(make_case())
    # a device with room for one run beside one kept state, not beside two; the states held use it up
    budget = one.device_bytes("cpu") + one.kept_bytes("cpu")[0] // 2

    def memory():
        free = Memory(available=budget - repeats.nbytes, total=budget)
        return free, free
    repeats = reuse.Repeats("cpu", memory)
    results = runner([make_case(seed=3), make_case(seed=4), make_case(seed=3), make_case(seed=3)], repeats)
    assert [r.metrics["inputs_reused"] for r in results] == [False, False, False, True]


def test_keep_fits_counts_every_kept_state_and_one_more_run():
    p = plan(make_case())
    kept_bytes, peak = p.kept_bytes("cpu")[0], p.device_bytes("cpu")
    exactly = Memory(available=kept_bytes + peak - kept_bytes, total=0)
    assert keep_fits([p], "cpu", exactly, None, held=(0, 0))
    assert not keep_fits([p], "cpu", Memory(exactly.available - 1, 0), None, held=(0, 0))
    assert keep_fits([p], "cpu", Memory(exactly.available - 1, 0), None, held=(1, 0))   # held bytes come back
    assert not keep_fits([p, p], "cpu", exactly, None, held=(0, 0))
    assert keep_fits([p], "cpu", None, None, held=(0, 0)) and not keep_fits([p, p], "cpu", None, None, (0, 0))
    # off the CPU the host's share counts too: the host copy and the goldens
    assert not keep_fits([p], "cuda", PLENTY, Memory(0, 0), held=(0, 0))
    assert p.kept_bytes("cuda")[1] < p.kept_bytes("cpu")[1]


def test_cases_asked_once_keep_a_bounded_number_of_states(runner, monkeypatch):
    """A plain run sends each case once: at most PROBATION of their states are kept (each is objects
    the worker's full collection walks twice a case), while a case asked again is kept as memory
    allows: a hunt larger than the probation reuses from its third iteration."""
    monkeypatch.setattr(reuse, "PROBATION", 2)
    repeats = kept()
    runner([make_case(seed=s) for s in range(5)], repeats)
    assert len(repeats._kept) == 2
    hunt = [make_case(seed=s) for s in (10, 11, 12)] * 3         # iteration-major, 3 cases > 2
    reused = [r.metrics["inputs_reused"] for r in runner(hunt, repeats)]
    # seed 10's state left the probation when 12's came; 11 and 12 were still on it
    assert reused == [False] * 3 + [False, True, True] + [True] * 3
    small = [make_case(seed=s) for s in (20, 21)] * 2             # within the probation: from the second
    assert [r.metrics["inputs_reused"] for r in runner(small, repeats)] == [False, False, True, True]
