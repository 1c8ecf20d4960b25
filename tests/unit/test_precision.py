"""Precision presets (docs/contracts.md, "Precision presets"): ``fp32-compute`` (the default)
fails a kernel that computes its QK-norm/RoPE prologue in bf16, ``bf16-compute`` admits it,
and the bugs the harness ships as mutants (and the outside bugs) are still caught under it.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from harness.case import DEFAULT_TOLERANCE, PRESETS, Case, SeqLens, SlotMode, default_tolerance
from harness.packs.qwen3.tolerances import BF16_COMPUTE_ATOL_RMS, BF16_COMPUTE_TOLERANCE
from harness.casefiles import load_matrix
from helpers import outside_kernels_in_process

TINY = PRESETS["tiny"]


def _case(op: str, kernel: str, precision: str, seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"),
          seed: int = 0, batch: int = 8, **extra) -> Case:
    return Case(f"{op}[{kernel},{precision}]", "m", "unit", op, kernel, replace(TINY, batch=batch), seq_lens,
                slot_mode, seed, precision=precision, **extra)


@pytest.fixture(scope="module")
def run_case():
    with outside_kernels_in_process() as run:
        yield lambda case: run(case).outcome.value


PROLOGUE_CASES = [
    ("rope_kv_write", {}),
    ("fused_rope_decode_attention", {}),
    ("prefill_attention", {"chunk_size": 16}),
]


@pytest.mark.parametrize("op, extra", PROLOGUE_CASES)
def test_a_bf16_prologue_fails_fp32_compute_and_passes_bf16_compute(run_case, op, extra):
    kernel = f"outside.bf16_prologue:{op}"
    assert run_case(_case(op, kernel, "fp32-compute", **extra)) == "MISMATCH"
    for seed in (0, 1, 2):
        assert run_case(_case(op, kernel, "bf16-compute", seed=seed, **extra)) == "PASS"


@pytest.mark.parametrize("op, extra", PROLOGUE_CASES)
def test_the_reference_passes_bf16_compute(run_case, op, extra):
    assert run_case(_case(op, "reference", "bf16-compute", **extra)) == "PASS"


MUTANTS = [
    # (kernel, op, case changes): each at a case where its bug can show
    ("skip_rope", "rope_kv_write", {}),
    ("harness.kernels.mutants.gptj_rope:fused_rope_decode_attention", "fused_rope_decode_attention", {}),
    ("stale_kv", "fused_rope_decode_attention", {}),
    ("harness.kernels.mutants.off_by_one_page:fused_rope_decode_attention", "fused_rope_decode_attention", {}),
    ("racy_head", "prefill_attention", {"chunk_size": 16, "env": {"RACY_HEAD_P": "1"}}),
    ("unguarded_slot_write", "rope_kv_write", {"slot_mode": SlotMode("padded", 0.25)}),
    ("returns_query", "fused_rope_decode_attention", {}),
    ("outside.wrong_gqa:fused_rope_decode_attention", "fused_rope_decode_attention", {}),
    ("outside.missed_first_key:prefill_attention", "prefill_attention", {"chunk_size": 16}),
    ("outside.unweighted_k_norm:rope_kv_write", "rope_kv_write", {}),
]


@pytest.mark.parametrize("kernel, op, extra", MUTANTS, ids=[m[0].split(":")[0].split(".")[-1] for m in MUTANTS])
def test_bugs_are_still_caught_under_bf16_compute(run_case, monkeypatch, kernel, op, extra):
    # execute_case runs in this process: the case's env (RACY_HEAD_P=1: torn every launch) is set here
    for name, value in extra.get("env", {}).items():
        monkeypatch.setenv(name, value)
    assert run_case(_case(op, kernel, "bf16-compute", **extra)) != "PASS"


def test_the_preset_sets_the_defaults_and_explicit_fields_start_from_it(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("op: fused_rope_decode_attention\nprecision: bf16-compute\n"
                    "tolerance: {query: {atol: 0.05}}\n")
    (case,) = load_matrix(path)
    assert case.precision == "bf16-compute" and case.case_id == "p"
    assert case.tolerance_for("out") == replace(BF16_COMPUTE_TOLERANCE, atol_rms=BF16_COMPUTE_ATOL_RMS)
    assert case.tolerance_for("query") == replace(BF16_COMPUTE_TOLERANCE, atol=0.05)
    # ops without a prologue keep their defaults; the default precision changes nothing
    assert default_tolerance("paged_decode_attention", "out", "bf16-compute") == default_tolerance(
        "paged_decode_attention", "out")
    assert default_tolerance("decode_layers", "k_cache", "bf16-compute") == default_tolerance("decode_layers", "k_cache")
    assert default_tolerance("rope_kv_write", "query") == DEFAULT_TOLERANCE


@pytest.mark.parametrize("text, message", [
    ("precision: fp64-compute\n", "p.yaml:2:12: precision: unknown precision 'fp64-compute'"),
    ("dtype: fp8\n", "p.yaml:2:8: dtype: unknown dtype 'fp8' (expected one of: bf16, fp16)"),
    ("matrix:\n  dtype: [bf16, float16]\n", "p.yaml:3:17: matrix.dtype[1]: unknown dtype 'float16'"),
])
def test_an_unknown_precision_or_dtype_is_one_line_with_its_place(tmp_path, text, message):
    from harness.casefiles import CaseFileError
    path = tmp_path / "p.yaml"
    path.write_text("op: rope_kv_write\n" + text)
    with pytest.raises(CaseFileError) as err:
        load_matrix(path)
    assert message in str(err.value) and "\n" not in str(err.value)
