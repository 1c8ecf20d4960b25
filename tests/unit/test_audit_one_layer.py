"""The internal audit operators act inside one layer of ``decode_layers`` (the last): the
layers before it, their caches included, are bit for bit the reference's, and the bug
still reaches the logits (in process, the worker-side wrapper called directly)."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import harness.kernels.mutants.operators as wrapper
import harness.kernels.reference as ref
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.worker.inputs import generate

LAYERS = 3
INTERNAL = ("stale_current_token", "off_by_one_page", "gptj_rope", "skip_rope")


@pytest.fixture(scope="module")
def inputs():
    geometry = replace(PRESETS["tiny"], num_layers=LAYERS)
    case = Case("layers-test", "unit", "tests/unit", "decode_layers", "reference", geometry=geometry,
                seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"), seed=3)
    return generate(case)


def _launch(kernel, inputs) -> dict[str, torch.Tensor]:
    args = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.args.items()}
    args.update({name: torch.full(shape, float("nan"), dtype=dtype) for name, (shape, dtype) in inputs.outputs.items()})
    kernel(**args)
    return args


def _every_layer(name: str):
    """The operator's mutant kernel on its own: the bug in every layer."""
    return getattr(wrapper._load(wrapper.INTERNAL[name])(), "decode_layers")


@pytest.mark.parametrize("name", INTERNAL)
def test_an_internal_operator_changes_the_last_layer_only(name, inputs, monkeypatch):
    monkeypatch.setenv(wrapper.MUTANT_VAR, name)
    monkeypatch.setenv(wrapper.KERNEL_VAR, "reference")
    reference = _launch(ref.decode_layers, inputs)
    mutant = _launch(wrapper.decode_layers, inputs)
    everywhere = _launch(_every_layer(name), inputs)
    for cache in ("k_cache", "v_cache"):
        assert torch.equal(mutant[cache][:-1], reference[cache][:-1]), cache     # layers before the last
    assert not torch.equal(everywhere["k_cache"][:-1], reference["k_cache"][:-1])  # what "every layer" would do
    assert not torch.equal(mutant["logits"], reference["logits"])               # the bug acts in the last
    assert not torch.equal(mutant["logits"], everywhere["logits"])


def test_a_rope_operator_writes_the_last_layers_cache_rotated_wrong(inputs, monkeypatch):
    monkeypatch.setenv(wrapper.MUTANT_VAR, "skip_rope")
    reference = _launch(ref.decode_layers, inputs)
    mutant = _launch(wrapper.decode_layers, inputs)
    assert not torch.equal(mutant["k_cache"][-1], reference["k_cache"][-1])
    assert torch.equal(mutant["v_cache"][-1], reference["v_cache"][-1])        # v is not rotated
