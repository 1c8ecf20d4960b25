"""The golden cache key covers every field of a case that changes its inputs, and no other.

Two cases whose inputs differ must never be served one golden; two that differ only in
how they are run or judged (tolerance, timeout, kernel, names) share it.  Every field
of ``Case`` and ``Geometry`` is listed below on one side or the other, so a new field
fails here until someone decides which.
"""
from __future__ import annotations

from dataclasses import fields, replace

import pytest
import torch

from harness.case import LatencySpec, PRESETS, Case, Geometry, SeqLens, SlotMode, Tolerance
from harness.goldens.cache import GoldenCache
from harness.worker.inputs import generate

TINY = PRESETS["tiny"]
BASE = Case(case_id="base", matrix="m", source="m.yaml:1", op="fused_rope_decode_attention", kernel="reference",
            geometry=TINY, seq_lens=SeqLens("const", (20,)), slot_mode=SlotMode("arange"), seed=1)
LAYERS = replace(BASE, op="decode_layers")
PREFILL = replace(BASE, op="prefill_attention", seq_lens=SeqLens("const", (40,)))

# field -> (the case it is varied on: one whose inputs it changes, the varied value)
GEOMETRY_CHANGES = {
    "batch": (BASE, 3),
    "num_heads": (BASE, 8),
    "num_kv_heads": (BASE, 4),
    "head_dim": (BASE, 64),
    "page_size": (BASE, 8),
    "hidden": (LAYERS, 256),
    "intermediate": (LAYERS, 512),
    "vocab": (LAYERS, 1024),
    "num_layers": (LAYERS, 2),
    "rope_theta": (BASE, 10_000.0),
    "eps": (BASE, 1e-5),
    "num_pages": (BASE, 12),
}
INPUT_CHANGES = {
    "op": (BASE, "rope_kv_write"),
    "seq_lens": (BASE, SeqLens("const", (21,))),
    "slot_mode": (BASE, SlotMode("random")),
    "chunk_size": (PREFILL, 16),
    "block_value": (BASE, 1),
    "scratch_pages": (BASE, 12),
    "seed": (BASE, 2),
    "attention": (BASE, "sharp"),
    "dtype": (BASE, "fp16"),
}
RUN_ONLY_CHANGES = {
    "case_id": "other",
    "matrix": "other",
    "source": "other.yaml:9",
    "kernel": "mylib.kernels:fused",
    "tolerance": {"out": Tolerance(atol=1.0, rtol=1.0, max_error_ratio=1.0)},
    "timeout_s": 5.0,
    "env": {"X": "1"},
    "tier": "nightly",
    "params": {"note": "x"},
    "command": {"command": "true"},      # command cases have no goldens: never part of a key
    "latency": LatencySpec(target=0.05),  # how a case is timed after its checks
    "precision": "bf16-compute",
}


def key(case: Case) -> str:
    return GoldenCache(None).key(case.op, generate(case).spec)


def same_inputs(a: Case, b: Case) -> bool:
    x, y = generate(a).args, generate(b).args
    if x.keys() != y.keys():
        return False
    for name in x:
        if isinstance(x[name], torch.Tensor):
            if x[name].shape != y[name].shape or x[name].dtype != y[name].dtype or not torch.equal(x[name], y[name]):
                return False
        elif x[name] != y[name]:
            return False
    return True


def test_every_field_is_classified():
    assert set(GEOMETRY_CHANGES) == {f.name for f in fields(Geometry)}
    case_fields = {f.name for f in fields(Case)}
    # "spec": a spec op's case is keyed by its module's own input spec (source hash, params, seed,
    # table: harness/worker/spec_inputs.py input_spec; tests/unit/test_spec_ops.py)
    assert set(INPUT_CHANGES) | set(RUN_ONLY_CHANGES) | {"geometry", "spec"} == case_fields
    assert not set(INPUT_CHANGES) & set(RUN_ONLY_CHANGES)


@pytest.mark.parametrize("name", sorted(GEOMETRY_CHANGES))
def test_a_geometry_field_that_changes_the_inputs_changes_the_key(name):
    base, value = GEOMETRY_CHANGES[name]
    varied = replace(base, geometry=replace(base.geometry, **{name: value}))
    assert not same_inputs(base, varied)          # the variation is a real one
    assert key(varied) != key(base)


@pytest.mark.parametrize("name", sorted(INPUT_CHANGES))
def test_a_case_field_that_changes_the_inputs_changes_the_key(name):
    base, value = INPUT_CHANGES[name]
    varied = replace(base, **{name: value})
    assert not same_inputs(base, varied)
    assert key(varied) != key(base)


@pytest.mark.parametrize("name", sorted(RUN_ONLY_CHANGES))
def test_a_field_that_does_not_change_the_inputs_keeps_the_key(name):
    varied = replace(BASE, **{name: RUN_ONLY_CHANGES[name]})
    assert same_inputs(BASE, varied)
    assert key(varied) == key(BASE)


def test_cases_that_differ_only_in_block_value_are_not_served_one_golden(tmp_path):
    """Warmup cases put every block on one page; which page is part of the inputs."""
    cache = GoldenCache(tmp_path)
    first, second = replace(BASE, block_value=1), replace(BASE, block_value=2)
    for case in (first, second):
        inputs = generate(case)
        _, hit = cache.get_or_compute(case.op, inputs.spec, inputs.args)
        assert not hit, case.block_value
    assert cache.computed == 2


def test_a_bf16_case_keeps_the_key_it_had_before_the_dtype_axis():
    """``dtype`` joins the input spec only where it is not the default."""
    spec = generate(BASE).spec
    assert "dtype" not in spec and generate(replace(BASE, dtype="fp16")).spec["dtype"] == "fp16"
