"""The rounding spread: goldens with and without bf16 q/k/v before attention, and the widened bound.

A kernel that keeps fresh q/k/v in fp32 (or computes exactly and rounds once) is correct;
the check widens each element's bound by |golden@exact - golden| so it passes, while a
real bug (wrong GQA head mapping) still fails.  docs/contracts.md, "Rounding spread".
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness import goldens
from harness.case import PRESETS, Case, SeqLens, SlotMode, Tolerance
from harness.devices import Device, backend
from harness.goldens.cache import GoldenCache
from harness.worker import checks
from harness.worker.execute import KernelLoader, execute_case
from harness.worker.inputs import generate
from harness.worker.ratio_allclose import ratio_allclose

OUTSIDE = Path(__file__).resolve().parent.parent / "outside_kernels"


def prefill_case(seed: int = 0, kernel: str = "reference") -> Case:
    """The reviewer's case: a whole 64-token chunk fresh, no cached context."""
    return Case("prefill[batch=1,seq_lens=multi_block,chunk_size=64,slot_mode=arange]", "prefill", "unit",
                "prefill_attention", kernel, replace(PRESETS["tiny"], batch=1), SeqLens("multi_block"),
                SlotMode("arange"), seed, chunk_size=64)


# -- ratio_allclose(slack=) -------------------------------------------------------------------

def test_slack_widens_each_element_by_its_own_amount():
    expected = torch.zeros(4)
    actual = torch.tensor([0.0, 0.01, 0.01, 0.01])
    plain = ratio_allclose(actual, expected, atol=3e-3, rtol=0.0, max_error_ratio=0.0)
    assert plain.bad_count == 3
    slack = torch.tensor([0.0, 0.0, 0.008, 0.02])
    widened = ratio_allclose(actual, expected, atol=3e-3, rtol=0.0, max_error_ratio=0.0, slack=slack)
    assert widened.bad_count == 1 and widened.first_bad == ((1,),)
    assert widened.max_abs_allowed == pytest.approx(3e-3 + slack[1].item())


def test_slack_with_rows_and_chunks_matches_an_unchunked_count():
    g = torch.Generator().manual_seed(0)
    expected = torch.randn(64, 4, 32, generator=g)
    actual = expected + 0.01 * torch.randn(64, 4, 32, generator=g)
    slack = 0.01 * torch.rand(64, 4, 32, generator=g)
    rows = torch.rand(64, generator=g) > 0.3
    cmp = ratio_allclose(actual, expected, atol=3e-3, rtol=3e-3, max_error_ratio=0.0, slack=slack, rows=rows,
                         chunk_elems=100)
    bad = (actual - expected).abs() > 3e-3 + 3e-3 * expected.abs() + slack
    assert cmp.bad_count == int(bad[rows].sum())


def test_slack_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="slack"):
        ratio_allclose(torch.zeros(3), torch.zeros(3), atol=0, rtol=0, max_error_ratio=0, slack=torch.zeros(2))


# -- goldens ------------------------------------------------------------------------------------

def test_exact_names_are_the_outputs_the_rounding_reaches():
    assert goldens.exact_names("rope_kv_write") == ()
    assert goldens.exact_names("paged_decode_attention") == ()
    assert goldens.exact_names("fused_rope_decode_attention") == ("out@exact",)
    assert goldens.exact_names("prefill_attention") == ("out@exact",)
    assert set(goldens.exact_names("decode_layers")) == {
        "logits@exact", "next_hidden@exact", "k_cache@exact", "v_cache@exact"}


def test_exact_golden_differs_from_the_rounded_one_by_about_one_bf16_rounding():
    ci = generate(prefill_case())
    g = goldens.compute("prefill_attention", ci.args, exact=True)
    assert set(g) == set(goldens.golden_names("prefill_attention"))
    spread = (g["out@exact"] - g["out"]).abs()
    assert 0 < spread.max() < 0.05
    assert torch.equal(goldens.compute("prefill_attention", ci.args)["out"], g["out"])
    # the exact golden in fp64 is the fp32 one to fp32 precision
    g64 = goldens.compute("prefill_attention", ci.args, torch.float64, exact=True)
    assert torch.allclose(g64["out@exact"].float(), g["out@exact"], atol=1e-5)


# -- checks.rounding_slack ------------------------------------------------------------------------

@pytest.mark.parametrize("rule, expected", [
    ("current", None),
    ("widen", [0.02, 0.02, 0.02]),
    ("interval", [0.02, 0.0, 0.02]),          # only on g_exact's side of g
    ("either", [0.0, 0.0, 0.022]),            # only where a is within tolerance of g_exact
])
def test_rounding_slack_rules(rule, expected):
    g = torch.zeros(3)
    exact = torch.full((3,), 0.02)
    actual = torch.tensor([0.05, -0.01, 0.022])
    slack = checks.rounding_slack(actual, g, exact, Tolerance(3e-3, 3e-3, 0.0), rule)
    if expected is None:
        assert slack is None
    else:
        assert torch.allclose(slack, torch.tensor(expected))


def test_no_exact_golden_means_no_slack():
    assert checks.rounding_slack(torch.zeros(2), torch.zeros(2), None, Tolerance(3e-3, 3e-3, 0.0)) is None


# -- end to end through the worker's execute path ---------------------------------------------------

@pytest.fixture
def run_case(monkeypatch):
    monkeypatch.syspath_prepend(str(OUTSIDE))
    device = Device("cpu")
    loader, be = KernelLoader(), backend(device)

    def run(case: Case, rule: str = "widen", half_ulp: bool = True) -> dict:
        monkeypatch.setattr(checks, "ACCEPT_RULE", rule)
        # half_ulp=False: the check before the stored dtype's half ulp joined the bound
        monkeypatch.setattr(checks, "stored_dtype", checks.stored_dtype if half_ulp else lambda actual: None)
        reply = execute_case(case, device, be, GoldenCache(None), loader)
        assert reply.failure is None, reply.failure
        return {"outcome": reply.outcome.value, "summary": reply.summary, "metrics": reply.metrics}
    yield run
    for name in [m for m in sys.modules if m == "outside" or m.startswith("outside.")]:
        del sys.modules[name]


def test_an_exact_kernel_passes_the_case_it_failed_before(run_case):
    case = prefill_case(kernel="outside.exact_round_once:prefill_attention")
    before = run_case(case, "current", half_ulp=False)
    # the count depends on the seed's draws (26 under the torch.Generator inputs, 46 now)
    assert before["outcome"] == "MISMATCH" and "/ 4224 elements bad" in before["summary"], before["summary"]
    after = run_case(case, "widen", half_ulp=False)
    assert after["outcome"] == "PASS", after["summary"]
    assert run_case(case, "widen")["outcome"] == "PASS"
    assert after["metrics"]["compare"]["out"]["rounding_spread_max"] > 0


def test_a_wrong_gqa_mapping_still_fails(run_case):
    after = run_case(prefill_case(kernel="outside.wrong_gqa:prefill_attention"), "widen")
    assert after["outcome"] == "MISMATCH", after["summary"]
    assert after["metrics"]["compare"]["out"]["bad_ratio"] > 0.3
