"""The one-read-pass ratio_allclose gives every verdict, count, maximum, index, worst element,
localisation and map of the implementation before it, bit for bit (the frozen copy in
``ratio_allclose_reference.py``): over random and adversarial inputs here, and over the bug-class
cases run in-process (every comparison a case makes goes through both)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import ratio_allclose_reference as reference
from harness.worker import ratio_allclose as current


def _same(kwargs_list):
    for actual, expected, kwargs in kwargs_list:
        old = reference.ratio_allclose(actual, expected, **kwargs)
        new = current.ratio_allclose(actual, expected, **kwargs)
        assert json.dumps(new.to_metrics(), sort_keys=True) == json.dumps(old.to_metrics(), sort_keys=True), kwargs
        assert new.report() == old.report()


def _values(rng: np.random.Generator, shape, kind: str) -> np.ndarray:
    n = int(np.prod(shape))
    x = rng.standard_normal(n)
    if kind == "zeros":
        x[rng.random(n) < 0.3] = 0.0
        x[rng.random(n) < 0.1] = -0.0
    elif kind == "wide":
        x *= 10.0 ** rng.integers(-40, 38, size=n)
    elif kind == "tiny":
        x *= 1e-40                                   # float32 subnormals
    elif kind == "grid":
        x = np.round(x * 4) / 4                      # many equal |diff|: ties everywhere
    return x.reshape(shape)


def _case(rng: np.random.Generator, k: int):
    ndim = int(rng.integers(0, 5))
    shape = tuple(int(v) for v in rng.integers(1, 7, size=ndim))
    kind = ["normal", "zeros", "wide", "tiny", "grid"][k % 5]
    expected = _values(rng, shape, kind)
    noise = rng.standard_normal(expected.shape) * 10.0 ** rng.integers(-8, 1)
    actual = expected + noise
    bad_share = rng.choice([0.0, 0.01, 0.3, 1.0])
    flip = rng.random(expected.shape) < bad_share
    actual = np.where(flip, actual + rng.choice([-1, 1], size=expected.shape) * rng.random(expected.shape) * 3,
                      actual)
    if k % 7 == 0 and expected.size:                 # opposite-sign ties of the largest |diff|
        flat_a, flat_e = actual.reshape(-1), expected.reshape(-1)
        flat_a[:] = flat_e
        flat_a[-1], flat_a[0] = flat_e[-1] + 2.0, flat_e[0] - 2.0
    if k % 11 == 0 and expected.size:                # non-finite values
        flat = actual.reshape(-1)
        flat[rng.integers(0, flat.size)] = rng.choice([np.nan, np.inf, -np.inf])
    if k % 13 == 0 and expected.size:
        expected.reshape(-1)[0] = 0.0
        actual.reshape(-1)[0] = rng.choice([0.0, 1e-3])
    dtype = [torch.float32, torch.float64, torch.bfloat16, torch.float16][int(rng.integers(0, 4))]
    e = torch.tensor(expected, dtype=torch.float32 if dtype != torch.float64 else torch.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        a = torch.tensor(actual).to(dtype)
    if k % 3 == 0 and a.dim() >= 2:                  # strided views
        a, e = a.transpose(0, -1).contiguous().transpose(0, -1), e.transpose(0, -1).contiguous().transpose(0, -1)
    kwargs = dict(atol=float(rng.choice([0.0, 1e-3, 3e-3, 0.1])), rtol=float(rng.choice([0.0, 1e-3, 1.6e-2])),
                  max_error_ratio=float(rng.choice([0.0, 0.005, 0.5])), chunk_elems=int(rng.choice([1, 7, 64, 1 << 18])))
    if rng.random() < 0.5 and a.dim() >= 1:
        kwargs["axes"] = tuple(f"d{i}" if rng.random() < 0.7 else None for i in range(a.dim()))
    if rng.random() < 0.3 and a.dim() >= 1:
        kwargs["rows"] = torch.tensor(rng.random(a.shape[0]) < 0.6)
    if rng.random() < 0.2 and a.dim() >= 1:
        kwargs["groups"] = {"g": (a.dim() - 1, torch.tensor(rng.integers(-1, 3, size=a.shape[-1])))}
    if rng.random() < 0.4:
        kwargs["stored"] = [torch.bfloat16, torch.float16, *current.ULP_DTYPES][int(rng.integers(0, 2 + len(current.ULP_DTYPES)))]
    if "stored" in kwargs and rng.random() < 0.6:
        # the output as the kernel stores it: the golden rounded to that dtype (within the floor,
        # beyond a small rtol), a few elements off
        # most goldens representable in it (exact), a few not (rounded: the floor decides), a few wrong
        e = e.to(kwargs["stored"]).to(e.dtype)
        inexact = torch.tensor(rng.random(e.shape) < float(rng.choice([0.03, 0.3])))
        e = torch.where(inexact, e * (1 + 1e-3), e)
        rounded = e.to(kwargs["stored"]).to(e.dtype)
        off = torch.tensor(rng.random(e.shape) < 0.02)
        a = torch.where(off, rounded + 0.5, rounded)
        kwargs["rtol"] = float(rng.choice([0.0, 1e-4]))
        kwargs["atol"] = float(rng.choice([0.0, 1e-5]))
    if rng.random() < 0.3:
        kwargs["slack"] = torch.tensor(np.abs(rng.standard_normal(e.shape)) * 1e-3, dtype=e.dtype)
    if rng.random() < 0.3 and e.dim() >= 1:
        kwargs["atol_rms"] = float(rng.choice([0.01, 0.05]))
    return a, e, kwargs


@pytest.mark.parametrize("block", range(6))
def test_random_and_adversarial_inputs_give_the_same_comparison(block):
    rng = np.random.default_rng([11, block])
    _same([_case(rng, 100 * block + k) for k in range(100)])


@pytest.mark.parametrize("scenario", ["all good", "some bad", "all bad", "a bad row"])
@pytest.mark.parametrize("stored", [None, torch.bfloat16])
def test_the_benchmark_shapes_give_the_same_comparison(scenario, stored):
    g = torch.Generator().manual_seed(3)
    e = torch.randn(24, 4099, generator=g)
    a = e + torch.randn(24, 4099, generator=g) * (1e-4 if scenario == "all good" else 1e-3)
    if scenario == "some bad":
        a.view(-1)[::1007] += 1.0
    elif scenario == "all bad":
        a += 1.0
    elif scenario == "a bad row":
        a[7] += 1.0
    kw = dict(atol=3e-3, rtol=3e-3, max_error_ratio=0.005, axes=("token", "vocab"), chunk_elems=1 << 14, stored=stored)
    _same([(a, e, kw), (a, e, {**kw, "atol_rms": 0.02}), (a.to(torch.bfloat16), e, kw)])


def test_every_bug_class_case_compares_the_same(tmp_path, monkeypatch):
    """The bug-class cases of ci/checks_on_device.py, run in-process: each comparison they make is
    made by both implementations and must agree."""
    import importlib.util

    from harness.devices import CpuBackend, Device
    from harness.goldens.cache import GoldenCache
    from harness.worker import checks, hints
    from harness.worker.execute import KernelLoader, execute_case
    from helpers import ROOT

    spec = importlib.util.spec_from_file_location("checks_on_device", ROOT / "ci" / "checks_on_device.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    compared = []

    def both(actual, expected, **kwargs):
        new = current.ratio_allclose(actual, expected, **kwargs)
        old = reference.ratio_allclose(actual, expected, **kwargs)
        assert json.dumps(new.to_metrics(), sort_keys=True) == json.dumps(old.to_metrics(), sort_keys=True)
        assert new.report() == old.report()
        compared.append(new.outcome)
        return new

    monkeypatch.setattr(checks, "ratio_allclose", both)
    monkeypatch.setattr(hints, "ratio_allclose", both)
    cache = GoldenCache(tmp_path / "goldens")
    for _, case in script.cases():
        with monkeypatch.context() as env:
            for name, value in case.env.items():
                env.setenv(name, value)
            execute_case(case, Device("cpu"), CpuBackend(), cache, KernelLoader())
    outcomes = {o.value for o in compared}
    assert len(compared) > 20 and {"PASS", "MISMATCH", "NONFINITE"} <= outcomes, outcomes


@pytest.mark.parametrize("block", range(2))
def test_sparse_clustered_and_tail_bad_elements_in_long_chunks(block):
    """Chunks of thousands of elements: bad elements few and scattered, clustered in whole
    blocks (many bad, few blocks), or in the chunk's last partial block."""
    rng = np.random.default_rng([23, block])
    cases = []
    for k in range(24):
        rows, width = int(rng.integers(1, 5)), int(rng.integers(2000, 6000))
        e = torch.tensor(rng.standard_normal((rows, width)), dtype=torch.float32)
        a = e + torch.tensor(rng.standard_normal((rows, width)) * 1e-3, dtype=torch.float32)
        flat = a.view(-1)
        mode = k % 4
        if mode == 0:                                    # scattered
            flat[torch.tensor(rng.integers(0, flat.numel(), size=int(rng.integers(1, 40))))] += 1.0
        elif mode == 1:                                  # whole clusters: many bad in few places
            for start in rng.integers(0, flat.numel() - 600, size=int(rng.integers(1, 4))):
                flat[int(start):int(start) + int(rng.integers(200, 600))] += 1.0
        elif mode == 2:                                  # the last elements of each row
            a[:, -int(rng.integers(1, 200)):] += 1.0
        # mode 3: nothing bad beyond the noise's tail
        kw = dict(atol=float(rng.choice([1e-3, 3e-3])), rtol=3e-3, max_error_ratio=0.005,
                  axes=("row", "col"), chunk_elems=int(rng.choice([1000, 4096, 1 << 14, 1 << 18])))
        if k % 3 == 0:
            kw["stored"] = torch.bfloat16
        if k % 5 == 0:
            kw["atol_rms"] = 0.02
        cases.append((a, e, kw))
    _same(cases)


def test_one_dense_cluster_in_a_few_blocks():
    """500 bad elements in 2 blocks of a 4096-element chunk: found from the blocks, yet too many
    for the sparse bookkeeping (the mask is made for it), then a clean chunk and a scattered one."""
    g = torch.Generator().manual_seed(5)
    e = torch.randn(3, 4096, generator=g)
    a = e + torch.randn(3, 4096, generator=g) * 1e-4
    a[0, 1000:1500] += 1.0
    a[2, ::997] += 1.0
    kw = dict(atol=3e-3, rtol=3e-3, max_error_ratio=0.005, axes=("row", "col"), chunk_elems=4096)
    _same([(a, e, kw), (a, e, {**kw, "stored": torch.bfloat16})])
