"""The attention goldens use the ``scale`` they are given, whatever the head size.

tests/unit/test_goldens.py checks the softmax with D 2 and scale 0.5, where 1/D is 0.5 as
well: a golden that replaced the given scale by 1/D would pass it.  Here the scale is
neither 1/sqrt(D) nor 1/D, and the expected value is worked out by hand.
"""
from __future__ import annotations

import math

import pytest
import torch

from harness import goldens
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.ops import OPS
from harness.worker.inputs import generate

SCALE = 0.3          # D 4: 1/sqrt(D) = 0.5, 1/D = 0.25


def test_paged_attention_softmax_uses_the_given_scale_by_hand():
    """One head, D 4, two positions: scores 0.3·[q·k₀, q·k₁] = 0.3·[0, 2] -> weights [1, e^0.6] / (1 + e^0.6)."""
    k_cache = torch.tensor([[[[0.0, 0.0, 0.0, 0.0]], [[2.0, 0.0, 0.0, 0.0]]]], dtype=torch.bfloat16)  # [N 1, P 2, Hkv 1, D 4]
    v_cache = torch.tensor([[[[1.0, 0.0, 0.0, 0.0]], [[0.0, 1.0, 0.0, 0.0]]]], dtype=torch.bfloat16)
    args = {
        "query": torch.tensor([[[1.0, 0.0, 0.0, 0.0]]], dtype=torch.bfloat16),
        "block_table": torch.tensor([[0]], dtype=torch.int32),
        "seq_lens": torch.tensor([2], dtype=torch.int32),
        "scale": SCALE, "k_cache": k_cache, "v_cache": v_cache,
    }
    out = goldens.compute("paged_decode_attention", args, torch.float64)["out"]
    w = math.exp(0.6)
    expected = torch.tensor([1 / (1 + w), w / (1 + w), 0.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(out[0, 0], expected, rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("op", [op for op, spec in OPS.items() if "scale" in spec.arg_names])
def test_every_attention_golden_reads_the_scale(op):
    case = Case(case_id="c", matrix="m", source="m.yaml:1", op=op, kernel="reference", geometry=PRESETS["tiny"],
                seq_lens=SeqLens("const", (20,)), slot_mode=SlotMode("arange"), seed=1,
                chunk_size=8 if op == "prefill_attention" else None)
    args = generate(case).args
    given = goldens.compute(op, args, torch.float64)
    halved = goldens.compute(op, dict(args, scale=args["scale"] / 2), torch.float64)
    attention_output = OPS[op].outputs[0].name          # out, or logits for decode_layers
    assert not torch.allclose(given[attention_output], halved[attention_output], rtol=1e-3, atol=1e-3)
