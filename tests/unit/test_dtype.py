"""``dtype: fp16`` (docs/contracts.md, "dtype"): the caches and the stored outputs are fp16, correct
kernels pass, bugs still fail, and the comparison takes fp16's half ulp."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from harness import packs
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.ops import OPS
from harness.worker.inputs import generate
from helpers import outside_kernels_in_process


def _case(op: str, kernel: str = "reference", dtype: str = "fp16", **extra) -> Case:
    chunk = {"chunk_size": 16} if op == "prefill_attention" else {}
    return Case(f"{op}[{kernel},{dtype}]", "m", "unit", op, kernel, replace(PRESETS["tiny"], batch=8),
                SeqLens("multi_block"), SlotMode("padded", 0.25), 0, dtype=dtype, **{**chunk, **extra})


@pytest.fixture(scope="module")
def run_case():
    with outside_kernels_in_process() as run:
        yield run


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_bf16_argument_follows_the_dtype(op):
    ci = generate(_case(op))
    for arg in OPS[op].args:
        if arg.role == "scalar":
            continue
        got = ci.outputs[arg.name][1] if arg.role == "output" else ci.args[arg.name].dtype
        want = torch.float16 if arg.dtype == "bfloat16" else getattr(torch, arg.dtype)
        assert got == want, arg.name


@pytest.mark.parametrize("op", sorted(OPS))
def test_correct_kernels_pass_fp16(run_case, op):
    reply = run_case(_case(op))
    assert reply.outcome.value == "PASS", reply.summary
    stored = {a.name: a.dtype for a in OPS[op].outputs + OPS[op].caches}
    for name, data in reply.metrics["compare"].items():
        if "skipped" not in data and stored[name] in ("bfloat16", "float32"):     # an int output has no ulp
            assert data["stored_ulp"] == ("float16" if stored[name] == "bfloat16" else None), name
    if op != "decode_layers" and op in packs.pack_of("rope_kv_write").ops:     # the Qwen3 ops' variants
        once = run_case(_case(op, f"outside.exact_round_once:{op}"))
        assert once.outcome.value == "PASS", once.summary


def test_fp16_errors_are_an_fp16_rounding_not_a_bf16_one(run_case):
    """The reference stores fp16 (not bf16 widened): its query is within fp16's half ulp plus a little."""
    bf16 = run_case(_case("rope_kv_write", dtype="bf16")).metrics["compare"]["query"]["max_abs_error"]
    fp16 = run_case(_case("rope_kv_write")).metrics["compare"]["query"]["max_abs_error"]
    assert fp16 < bf16 / 4


@pytest.mark.parametrize("kernel, op, extra", [
    ("skip_rope", "rope_kv_write", {}),
    ("stale_kv", "fused_rope_decode_attention", {}),
    ("harness.kernels.mutants.off_by_one_page:fused_rope_decode_attention", "fused_rope_decode_attention", {}),
    ("racy_head", "paged_decode_attention", {"env": {"RACY_HEAD_P": "1"}}),
    ("unguarded_slot_write", "prefill_attention", {}),
    ("outside.wrong_gqa:decode_layers", "decode_layers", {}),
])
def test_bugs_still_fail_with_fp16(run_case, monkeypatch, kernel, op, extra):
    # execute_case runs in this process: the case's env (RACY_HEAD_P=1: torn every launch) is set here
    for name, value in extra.get("env", {}).items():
        monkeypatch.setenv(name, value)
    assert run_case(_case(op, kernel, **extra)).outcome.value != "PASS"
