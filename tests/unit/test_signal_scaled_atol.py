"""``atol_rms``: each row's atol follows the RMS of its golden row (docs/contracts.md, "The
bound follows the signal").  The semantics on hand-built rows, then the attention outputs'
default on a long case: a correct kernel written elsewhere passes, a bf16-accumulator bug that
the fixed atol lets through fails."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from harness.case import DEFAULT_TOLERANCE, PRESETS, Case, SeqLens, SlotMode, default_tolerance
from harness.packs.qwen3.tolerances import ATTENTION_ATOL_RMS
from harness.worker.ratio_allclose import ATOL_RMS_FLOOR, ratio_allclose, row_atol

from helpers import case_runner, outside_kernels_on_path


def _rows(scales: list[float], width: int = 64, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(len(scales), width, generator=g, dtype=torch.float64)
    base = base / base.pow(2).mean(-1, keepdim=True).sqrt()          # each row RMS exactly 1
    return (base * torch.tensor(scales, dtype=torch.float64)[:, None]).float()


def test_row_atol_is_the_fraction_of_each_rows_rms_between_floor_and_cap():
    e = _rows([1.0, 0.05, 1e-6])
    got = row_atol(e, 3e-3, 0.02)
    assert got[0].item() == pytest.approx(3e-3)                    # 0.02 x 1 capped at atol
    assert got[1].item() == pytest.approx(0.02 * 0.05, rel=1e-5)   # 1e-3: the row's own
    assert got[2].item() == pytest.approx(3e-3 / ATOL_RMS_FLOOR)    # floored, never zero


def test_non_finite_row_keeps_atol_and_still_fails_on_its_nan():
    e = _rows([0.05, 0.05])
    e[1, 3] = math.nan
    assert row_atol(e, 3e-3, 0.02)[1].item() == pytest.approx(3e-3)
    cmp = ratio_allclose(e.clone(), e, atol=3e-3, rtol=0.0, max_error_ratio=0.5, atol_rms=0.02)
    assert not cmp.passed and cmp.nonfinite_expected == 1


def test_an_error_the_fixed_atol_admits_fails_a_small_row_only():
    e = _rows([1.0, 0.05])
    a = e + 2e-3                                                  # under atol 3e-3 everywhere
    fixed = ratio_allclose(a, e, atol=3e-3, rtol=0.0, max_error_ratio=0.0)
    scaled = ratio_allclose(a, e, atol=3e-3, rtol=0.0, max_error_ratio=0.0, atol_rms=0.02, axes=("row", None))
    assert fixed.passed
    assert not scaled.passed
    assert scaled.bad_count == 64 and scaled.localisation["row"] == (0.0, 1.0)   # the small row, all of it
    assert scaled.atol_min == pytest.approx(1e-3, rel=1e-5)
    assert "with atol 0.003 scaled to 0.02 x row RMS (down to 0.001), rtol 0" in scaled.report()
    assert scaled.max_abs_allowed <= 3e-3


def test_same_verdicts_as_one_call_per_row_with_that_rows_atol():
    """The per-row atol enters as slack over the smallest: the bound must be each row's own
    term for term, with rtol, the half ulp and a rounding slack in play."""
    e = _rows([1.0, 0.3, 0.05, 0.01, 2.0, 0.002], width=128, seed=3)
    g = torch.Generator().manual_seed(4)
    a = (e + torch.randn(e.shape, generator=g) * 1.5e-3).bfloat16()
    slack = torch.rand(e.shape, generator=g) * 2e-4
    scaled = ratio_allclose(a, e, atol=3e-3, rtol=3e-3, max_error_ratio=1.0, atol_rms=0.02, slack=slack,
                            stored=torch.bfloat16, axes=("row", None))
    per_row = row_atol(e, 3e-3, 0.02)
    for r in range(e.shape[0]):
        one = ratio_allclose(a[r:r + 1], e[r:r + 1], atol=float(per_row[r]), rtol=3e-3, max_error_ratio=1.0,
                             slack=slack[r:r + 1], stored=torch.bfloat16)
        assert scaled.localisation["row"][r] * 128 == pytest.approx(one.bad_count)


def test_rows_left_out_do_not_set_the_smallest_atol():
    e = _rows([1.0, 0.001, 1.0])
    cmp = ratio_allclose(e.clone(), e, atol=3e-3, rtol=0.0, max_error_ratio=0.0, atol_rms=0.02,
                         rows=torch.tensor([True, False, True]))
    assert cmp.passed and cmp.atol_min == pytest.approx(3e-3)


@pytest.mark.parametrize("shape", [(), (7,), (2, 3, 5)])
def test_any_rank(shape):
    e = torch.full(shape, 0.5)
    assert ratio_allclose(e + 1e-4, e, atol=3e-3, rtol=0.0, max_error_ratio=0.0, atol_rms=0.02).passed
    assert not ratio_allclose(e + 2e-2, e, atol=3e-3, rtol=0.0, max_error_ratio=0.0, atol_rms=0.02).passed


@pytest.mark.parametrize("bad", [0.0, -0.1, math.nan, math.inf])
def test_bad_atol_rms_is_not_my_input(bad):
    with pytest.raises(ValueError, match="atol_rms"):
        ratio_allclose(torch.ones(3), torch.ones(3), atol=1e-3, rtol=0.0, max_error_ratio=0.0, atol_rms=bad)


def test_attention_outputs_scale_and_nothing_else_does_by_default():
    for op in ("paged_decode_attention", "fused_rope_decode_attention", "prefill_attention"):
        assert default_tolerance(op, "out") == replace(DEFAULT_TOLERANCE, atol_rms=ATTENTION_ATOL_RMS)
        assert default_tolerance(op, "k_cache").atol_rms is None
    assert default_tolerance("fused_rope_decode_attention", "query").atol_rms is None
    assert default_tolerance("decode_layers", "logits").atol_rms is None


# -- in process on a long case: inputs -> golden -> kernel -> checks ----------------------------

LONG = SeqLens("list", (2048, 2047, 2049, 1025))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    one_case = case_runner(tmp_path_factory.mktemp("goldens"))

    def run(op: str, kernel: str, attention: str = "uniform", atol_rms: float | None = ATTENTION_ATOL_RMS):
        return one_case(Case("c", "m", "m.yaml:1", op, f"{kernel}:{op}", PRESETS["tiny"], LONG, SlotMode("random"),
                             seed=0, attention=attention,
                             tolerance={"out": replace(default_tolerance(op, "out"), atol_rms=atol_rms)}))

    with outside_kernels_on_path():
        yield run


@pytest.mark.parametrize("kernel", ["outside.torch_sdpa", "outside.bf16_probs", "outside.transformers_qwen3"])
@pytest.mark.parametrize("op", ["paged_decode_attention", "fused_rope_decode_attention"])
def test_correct_kernels_written_elsewhere_pass_the_scaled_bound_at_long_context(run, op, kernel):
    """Including one that rounds the softmax probabilities to bf16 before P.V, as FlashAttention does."""
    assert run(op, kernel) == ("PASS", "all outputs, caches and guard bands match")


@pytest.mark.parametrize("op", ["paged_decode_attention", "fused_rope_decode_attention"])
def test_a_bf16_accumulator_fails_the_scaled_bound_and_passes_a_fixed_atol(run, op):
    """The bug the scaling exists for: its error is about 1% of an output whose RMS is 0.02-0.05
    over 2048 keys of spread attention, below a fixed atol of 3e-3."""
    outcome, summary = run(op, "outside.bf16_accumulator")
    assert outcome == "MISMATCH" and summary.startswith("out: "), summary
    assert run(op, "outside.bf16_accumulator", atol_rms=None)[0] == "PASS"
