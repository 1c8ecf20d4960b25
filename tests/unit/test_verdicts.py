"""Verdict decisions, through the worker's real path (inputs → golden → launch → checks) in process.

Each test runs a case with a kernel from ``tests/kernels_under_test/verdict_bugs`` (loaded
by import path, as an external kernel library is) and asserts the outcome a kernel
engineer must see: which finding wins when several fire, which rows are compared, and
poison left in an output told apart from a NaN the kernel computed.
"""
from __future__ import annotations

import pytest

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device, backend
from harness.goldens.cache import GoldenCache
from harness.worker.execute import KernelLoader, execute_case
from helpers import KERNELS_UNDER_TEST

CPU = Device("cpu")
TINY = PRESETS["tiny"]
B, HQ, D = TINY.batch, TINY.num_heads, TINY.head_dim


@pytest.fixture(autouse=True)
def kernel_library(monkeypatch):
    monkeypatch.syspath_prepend(str(KERNELS_UNDER_TEST))


def make_case(op: str, kernel: str, **fields) -> Case:
    base = dict(case_id=f"{op}[{kernel}]", matrix="verdicts", source="test_verdicts.py", op=op,
                kernel=kernel if kernel == "reference" else f"verdict_bugs.kernels:{kernel}",
                geometry=TINY, seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("padded", 0.5), seed=3)
    return Case(**{**base, **fields})


def checked(case: Case) -> dict:
    """The checked case's outcome, summary, report and metrics (its failure, if any, fails the test)."""
    reply = execute_case(case, CPU, backend(CPU), GoldenCache(None), KernelLoader())
    assert reply.failure is None, reply.failure
    return {"outcome": reply.outcome.value, "summary": reply.summary, "report": reply.report,
            "metrics": reply.metrics}


def tags(report: str) -> list[str]:
    """The outcome of each finding, in report order: ``[CONTRACT] k_cache: ...`` -> ``CONTRACT``."""
    return [line[1:line.index("]")] for line in report.splitlines() if line.startswith("[")]


# -- precedence: the most specific finding is the verdict --------------------------------------


def test_a_stray_cache_row_outranks_the_mismatch_it_comes_with():
    result = checked(make_case("fused_rope_decode_attention", "stray_row_and_bad_out"))
    assert result["outcome"] == "CONTRACT", result["report"]
    assert result["summary"].startswith("k_cache: 1 rows outside the slot mapping changed"), result["summary"]
    # The mismatch is kept, reported after the cause.
    assert tags(result["report"]) == ["CONTRACT", "MISMATCH"], result["report"]
    assert "[MISMATCH] out:" in result["report"]


def test_poison_left_outranks_a_computed_nan_and_both_are_reported():
    result = checked(make_case("paged_decode_attention", "head_0_unwritten_nan_in_head_1"))
    assert result["outcome"] == "UNWRITTEN", result["report"]
    assert tags(result["report"])[:2] == ["UNWRITTEN", "NONFINITE"], result["report"]
    # Each finding counts its own elements: a poisoned element is not also a computed NaN.
    assert f"out: {B * D} / {B * HQ * D} elements never written (poison left) in batch all {B}, head [0]" \
        in result["report"]
    assert f"out: {B * D} NaN/Inf elements computed by the kernel in batch all {B}, head [1]" in result["report"]


# -- the slot mask on outputs ------------------------------------------------------------------


@pytest.mark.parametrize("op, kernel", [
    ("fused_rope_decode_attention", "fused_skips_padding_rows"),
    ("decode_layers", "layers_skip_padding_rows"),
])
def test_output_rows_of_padding_slots_are_not_compared(op, kernel):
    """Rows with slot < 0 are warmup/padding: a kernel may leave them unwritten (poison stays)."""
    result = checked(make_case(op, kernel))
    assert result["outcome"] == "PASS", result["report"]


def test_output_rows_of_valid_slots_are_compared():
    """The mask drops only the padding rows: the same kernel with every slot valid writes every row."""
    result = checked(make_case("fused_rope_decode_attention", "fused_skips_padding_rows",
                               slot_mode=SlotMode("arange")))
    assert result["outcome"] == "PASS", result["report"]
    assert result["metrics"]["compare"]["out"]["numel"] == B * HQ * D


def test_when_every_slot_is_padding_no_output_row_is_compared():
    result = checked(make_case("fused_rope_decode_attention", "fused_skips_padding_rows",
                               slot_mode=SlotMode("const", -1)))
    assert result["outcome"] == "PASS", result["report"]
    assert result["metrics"]["compare"]["out"] == {"skipped": "every row has slot < 0"}


# -- poison left vs NaN/Inf computed -------------------------------------------------------------


def test_poison_left_in_an_output_is_unwritten():
    result = checked(make_case("paged_decode_attention", "head_0_unwritten"))
    assert result["outcome"] == "UNWRITTEN", result["report"]
    assert result["summary"] == (f"out: {B * D} / {B * HQ * D} elements never written (poison left) "
                                 f"in batch all {B}, head [0]")
    assert "NONFINITE" not in tags(result["report"])


@pytest.mark.parametrize("kernel", ["nan_in_head_1", "inf_in_head_1"])
def test_a_nan_or_inf_the_kernel_computed_is_nonfinite(kernel):
    result = checked(make_case("paged_decode_attention", kernel))
    assert result["outcome"] == "NONFINITE", result["report"]
    assert result["summary"] == f"out: {B * D} NaN/Inf elements computed by the kernel in batch all {B}, head [1]"
    assert "UNWRITTEN" not in tags(result["report"])


def test_the_reference_passes_the_same_cases():
    for op in ("fused_rope_decode_attention", "paged_decode_attention", "decode_layers"):
        result = checked(make_case(op, "reference"))
        assert result["outcome"] == "PASS", (op, result["report"])
