"""Writes into read-only inputs are CONTRACT, named and localised (harness/worker/input_guard.py).

Hostile kernels from ``tests/kernels_under_test/input_writers`` compute every output right
and change one input; each must get CONTRACT naming that input, through the worker's real
path (inputs -> golden -> launch -> checks) in process.  Correct kernels get no such finding.
"""
from __future__ import annotations

import importlib
from dataclasses import replace

import pytest
import torch

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.devices import Device, backend
from harness.goldens.cache import GoldenCache
from harness.ops import OPS
from harness.worker.execute import KernelLoader, execute_case
from harness.ops.registry import BUILTINS
from harness.worker.input_guard import InputSeal
from harness.worker.inputs import generate
from helpers import KERNELS_UNDER_TEST, ROOT

CPU = Device("cpu")
TINY = PRESETS["tiny"]
B, HQ, D = TINY.batch, TINY.num_heads, TINY.head_dim
OUTSIDE_KERNELS = ROOT / "tests" / "outside_kernels"


@pytest.fixture(autouse=True)
def kernel_libraries(monkeypatch):
    monkeypatch.syspath_prepend(str(KERNELS_UNDER_TEST))
    monkeypatch.syspath_prepend(str(OUTSIDE_KERNELS))


def make_case(kernel: str, op: str = "fused_rope_decode_attention", **fields) -> Case:
    base = dict(case_id=f"{op}[{kernel}]", matrix="inputs", source="test_input_guard.py", op=op, kernel=kernel,
                geometry=TINY, seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("padded", 0.5), seed=3,
                chunk_size=8 if op == "prefill_attention" else None)
    return Case(**{**base, **fields})


def checked(case: Case) -> dict:
    reply = execute_case(case, CPU, backend(CPU), GoldenCache(None), KernelLoader())
    assert reply.failure is None, reply.failure
    return {"outcome": reply.outcome.value, "summary": reply.summary, "report": reply.report}


def input_lines(report: str) -> list[str]:
    return [line for line in report.splitlines() if "the kernel wrote into input" in line]


# -- the seal ------------------------------------------------------------------------------------

def test_seal_reports_nothing_when_nothing_changed():
    x = torch.randn(4, 8)
    assert InputSeal({"x": x, "i": torch.arange(5, dtype=torch.int32)}).written() == ()


def test_seal_finds_every_changed_element_bit_for_bit():
    x = torch.zeros(4, 8)
    i = torch.arange(5, dtype=torch.int32)
    seal = InputSeal({"x": x, "i": i})
    x[2, 3] = -0.0                   # equal as a float, different bits
    x[3, 0] = 1.5
    i[4] = 7
    (wx, wi) = seal.written()
    assert (wx.name, int(wx.changed.sum()), wx.first, wx.was, wx.now) == ("x", 2, (2, 3), 0.0, -0.0)
    assert wx.changed.nonzero().tolist() == [[2, 3], [3, 0]]
    assert (wi.name, wi.first, wi.was, wi.now) == ("i", (4,), 4.0, 7.0)


# -- hostile kernels -------------------------------------------------------------------------------

def test_zeroing_q_proj_after_computing_right_is_contract():
    result = checked(make_case("input_writers.kernels:zeroes_q_proj"))
    assert result["outcome"] == "CONTRACT", result["report"]
    assert result["summary"] == (f"the kernel wrote into input q_proj: {B * HQ * D} of {B * HQ * D} elements "
                                 f"changed in batch all {B}, head all {HQ}")
    assert "batch: all 4 indices bad" in result["report"]
    assert "before the launch, 0 after" in result["report"]
    assert [line[1:line.index("]")] for line in result["report"].splitlines() if line.startswith("[")] \
        == ["CONTRACT"], "every output is right: the input write is the only finding"


def test_zeroing_positions_names_the_rows_whose_position_was_not_zero():
    case = make_case("input_writers.kernels:zeroes_positions", seq_lens=SeqLens("list", (17, 1, 33, 1)))
    assert generate(case).args["positions"].tolist() == [16, 0, 32, 0]     # rows 1 and 3 stay as they were
    nonzero = [0, 2]
    result = checked(case)
    assert result["outcome"] == "CONTRACT", result["report"]
    assert result["summary"] == (f"the kernel wrote into input positions: {len(nonzero)} of {B} elements changed "
                                 f"in batch [{', '.join(map(str, nonzero))}]")


def test_normalising_q_proj_in_place_passes_every_output_and_is_still_caught():
    result = checked(make_case("input_writers.kernels:normalises_q_proj"))
    assert result["outcome"] == "CONTRACT", result["report"]
    assert input_lines(result["report"]) == [
        f"[CONTRACT] the kernel wrote into input q_proj: {B * HQ * D} of {B * HQ * D} elements changed "
        f"in batch all {B}, head all {HQ}"]
    assert "MISMATCH" not in result["report"]


def test_clobbering_the_rope_table_names_the_positions_it_overwrote():
    case = make_case("input_writers.kernels:clobbers_rope_cos")
    rows = sorted(set(generate(case).args["positions"].tolist()))      # cos is 1 at position 0, never 0
    result = checked(case)
    assert result["outcome"] == "CONTRACT", result["report"]
    assert result["summary"].startswith("the kernel wrote into input rope_cos: "), result["summary"]
    assert f" in position [{', '.join(map(str, rows))}]" in result["summary"], result["summary"]
    assert "rope_sin" not in result["report"]


# -- correct kernels ---------------------------------------------------------------------------------

CORRECT = ["reference", "torch-sdpa", "torch-flex", "transformers-qwen3", *(f"outside.{m}" for m in (
    "exact_round_once", "bf16_intermediate", "kv_from_cache", "bf16_probs", "torch_sdpa", "torch_sdpa_bf16",
    "torch_flex", "transformers_qwen3"))]


@pytest.mark.parametrize("kernel", CORRECT)
def test_correct_kernels_write_no_input(kernel):
    ran = 0
    for op in OPS:
        if kernel in BUILTINS:
            if op not in BUILTINS[kernel]:
                continue
            name = kernel
        else:
            if not hasattr(importlib.import_module(kernel), op):
                continue
            name = f"{kernel}:{op}"
        result = checked(make_case(name, op, geometry=replace(TINY, batch=2)))
        assert not input_lines(result["report"]), (op, result["report"])
        ran += 1
    assert ran
