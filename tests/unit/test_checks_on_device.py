"""The checks run on the device that holds the outputs (issue 14, item 5), proven on a CPU
stand-in for an accelerator (``tests/fake_accelerator.py``): a tensor there reads
``cuda:0``, mixing it with a host tensor raises as CUDA does, and every read back to the
host is counted.  Every bug class the audit's operators inject gets the same outcome,
summary and report text as on the CPU, and what comes back to the host (the digest's column
sums, the guard bands, the counts and listed values of the report) does not grow with the
caches."""
from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import replace

import pytest
import torch

from harness.audit.operators import OPERATORS, mutated
from harness.case import Case
from harness.devices import CpuBackend, Device
from harness.goldens.cache import GoldenCache
from harness.ops import OPS as OPS_SPEC
from harness.outcomes import Outcome
from harness.worker import execute
from harness.worker.input_digest import PERIOD
from harness.worker.execute import KernelLoader, execute_case

from fake_accelerator import FAKE, FakeAccelerator
from helpers import ROOT

# The cases ci/checks_on_device.py compares on a real accelerator: the same set here.
_spec = importlib.util.spec_from_file_location("checks_on_device", ROOT / "ci" / "checks_on_device.py")
on_device_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(on_device_script)


class FakeCudaBackend(CpuBackend):
    """The CPU backend, but the kernel's device is the fake accelerator's."""

    kind = "cuda"

    def torch_device(self, device: Device):
        return FAKE


def _guard_band_bytes(case: Case) -> int:
    """One side's band of a cache, read as bytes to find a write into it (launch.py)."""
    g = case.geometry
    return max(4096, case.geometry.page_size * g.num_kv_heads * g.head_dim * 2)


def _json(data) -> str:
    return json.dumps(data, sort_keys=True)


def _on_both(case: Case, cache: GoldenCache, monkeypatch) -> tuple:
    """(CPU reply, fake-device reply, what the fake device's case read back to the host: the
    input digest, the guard bands, the checks; not the in-process golden, which the golden
    process computes from its own host draw in a real run)."""
    for name, value in case.env.items():      # the mutant wrapper reads its operator from the environment
        monkeypatch.setenv(name, value)
    plain = execute_case(case, Device("cpu"), CpuBackend(), cache, KernelLoader())
    in_golden: list[tuple[str, int]] = []
    goldens = execute._goldens

    def golden_apart(*args, **kwargs):
        start = len(fake.transfers)
        try:
            return goldens(*args, **kwargs)
        finally:
            in_golden.extend(fake.transfers[start:])
            del fake.transfers[start:]

    monkeypatch.setattr(execute, "_goldens", golden_apart)
    hint = execute._hint

    def hint_apart(*args, **kwargs):
        # a MISMATCH's hint recomputes goldens on the host from host copies of the inputs, as
        # the in-process golden does (harness/worker/hints.py): not the checks' reads
        start = len(fake.transfers)
        try:
            return hint(*args, **kwargs)
        finally:
            del fake.transfers[start:]

    monkeypatch.setattr(execute, "_hint", hint_apart)
    with FakeAccelerator() as fake:
        on_device = execute_case(case, Device("cuda:0"), FakeCudaBackend(), cache, KernelLoader())
    monkeypatch.undo()
    assert in_golden, "the in-process golden read the inputs on the host"
    return plain, on_device, fake.transfers


@pytest.mark.parametrize("case", [pytest.param(case, id=label.replace(" ", "-"))
                                  for label, case in on_device_script.cases()])
def test_every_bug_class_gets_the_same_verdict_and_report_on_the_device(case, tmp_path, monkeypatch):
    plain, on_device, read = _on_both(case, GoldenCache(tmp_path / "goldens"), monkeypatch)
    assert on_device.failure is None, on_device.failure and on_device.failure.message
    assert plain.failure is None
    assert (on_device.outcome, on_device.summary, on_device.report) == (plain.outcome, plain.summary, plain.report)
    assert _json(on_device.metrics["compare"]) == _json(plain.metrics["compare"])     # NaN: no data
    assert on_device.metrics["inputs_digest"] == plain.metrics["inputs_digest"]
    assert read, "the checks read their counts back"
    # the digest's column sums, the guard bands, indices, per-axis ratios, listed values:
    # never an output or a cache
    assert max(n for _, n in read) <= max(400, PERIOD, _guard_band_bytes(case)), read


def test_a_big_cache_is_checked_without_coming_to_the_host(tmp_path, monkeypatch):
    """4096 scratch pages (about 1 M cache elements per cache), a kernel writing outside the slot
    mapping and one writing for slot -1: found on the device, with reads bounded by the number
    of tensors and buffers, not by their size."""
    base = replace(on_device_script.base_case("fused_rope_decode_attention"), scratch_pages=4096)
    cache = GoldenCache(tmp_path / "goldens")
    by_name = {o.name: o for o in OPERATORS}
    for case in (base, mutated(base, by_name["neighbor_slot_write"]), mutated(base, by_name["slot_minus_one_write"])):
        plain, on_device, read = _on_both(case, cache, monkeypatch)
        assert on_device.report == plain.report
        assert plain.metrics["inputs_bytes"] > 4_000_000
        tensors = sum(1 for a in OPS_SPEC[case.op].args if a.role in ("input", "cache"))
        buffers = len(OPS_SPEC[case.op].caches) + len(OPS_SPEC[case.op].outputs)
        bound = 2 * PERIOD * tensors + 2 * buffers * _guard_band_bytes(case) + 1000
        assert sum(n for _, n in read) <= bound < plain.metrics["inputs_bytes"] // 20, read
    assert on_device.outcome is Outcome.OOB_WRITE


def test_the_fake_accelerator_refuses_what_a_real_one_refuses():
    """Its teeth: a check that mixed host and device tensors, or read a buffer to the host
    through numpy, would fail the tests above instead of passing on the CPU."""
    with FakeAccelerator() as fake:
        on_device = torch.ones(4, device=FAKE)
        assert on_device.device == FAKE and (on_device * 2).device == FAKE
        assert torch.empty(2, device=on_device.device).device == FAKE
        with pytest.raises(RuntimeError, match="same device"):
            on_device & torch.ones(4, dtype=torch.bool)
        with pytest.raises(TypeError, match="numpy"):
            on_device.numpy()
        assert on_device[torch.tensor([0, 2])].device == FAKE      # host indices are allowed, as on CUDA
        assert (on_device + torch.tensor(1.0)).device == FAKE      # and host scalars
        host = on_device.cpu()
        assert host.device == torch.device("cpu")
        int(on_device.sum())
        on_device.tolist()
    assert fake.transfers == [("cpu", 4), ("__int__", 1), ("tolist", 4)]
    assert os.environ.get("HARNESS_MUTANT") is None


def test_the_bitwise_comparison_of_a_flake_hunt_stays_on_the_device(tmp_path):
    """A fixed-seed hunt's baseline is kept on the buffers' device and compared there: a flipped
    element gets the same report as on the CPU, and what comes back does not grow with the cache
    beyond the one host copy the baseline file is written from."""
    from harness.ops import OPS as specs
    from harness.worker.determinism import Baselines, diff_against_baseline

    op = specs["rope_kv_write"]
    cache = torch.randn(2048, 16, 2, 32, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    query = torch.randn(4, 4 * 32, generator=torch.Generator().manual_seed(1))

    def iterations(place) -> list[dict]:
        baselines, path, found = Baselines(), str(tmp_path / f"{place is not None}.safetensors"), []
        for repeat in range(3):
            c, q = cache.clone(), query.clone()
            if repeat == 2:
                c[100, 3, 1, 7] += 1          # one element of one page differs in the last iteration
            if place is not None:
                c, q = place(c), place(q)
            found.append(diff_against_baseline(baselines, path, op, {"query": q}, {"k_cache": c}, repeat))
        fresh = Baselines().get(path, FAKE if place is not None else "cpu")    # another worker reads the file
        found.append({"on": str(fresh[0]["k_cache"].device)})
        return found

    plain = iterations(None)
    with FakeAccelerator() as fake:
        on_device = iterations(lambda t: t.to(FAKE))
    assert [d.get("identical") for d in plain] == [True, True, False, None]
    assert _json(on_device[:3]) == _json(plain[:3])
    assert on_device[2]["report"].startswith("k_cache: 1 / 2097152 elements")
    assert on_device[3] == {"on": "cuda:0"} and plain[3] == {"on": "cpu"}
    copies = [n for what, n in fake.transfers if n >= cache.numel()]
    assert copies == [cache.numel()], "one host copy of the cache: the baseline file's"
