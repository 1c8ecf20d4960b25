"""Hints for a wholesale MISMATCH (harness/worker/hints.py), in-process: the shipped mutants and
buggy kernels written outside the harness (tests/outside_kernels) get the hint their bug
deserves on every RoPE op; correct kernels, and kernels with unrelated bugs, never get one."""
from __future__ import annotations

import importlib
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness import goldens
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.outcomes import Outcome
from harness.worker import checks, hints
from harness.worker.inputs import generate
from harness.worker.launch import launch

CPU = torch.device("cpu")
OUTSIDE = Path(__file__).resolve().parent.parent / "outside_kernels"
GPTJ = "looks like interleaved RoPE (GPT-J pairs) instead of NeoX halves"
SKIPPED = "looks like RoPE skipped"
LATE = "looks like positions shifted by +1"
ROPE_OPS = ("rope_kv_write", "fused_rope_decode_attention", "prefill_attention", "decode_layers")


@pytest.fixture(scope="module", autouse=True)
def outside_on_path():
    sys.path.insert(0, str(OUTSIDE))
    yield
    sys.path.remove(str(OUTSIDE))


def case(op: str, seed: int = 3, **kw) -> Case:
    extra = {"chunk_size": 8} if op == "prefill_attention" else {}
    base = dict(case_id="t", matrix="t", source="t", op=op, kernel="reference",
                geometry=replace(PRESETS["tiny"], batch=3), seq_lens=SeqLens("multi_block"),
                slot_mode=SlotMode("padded", 0.25), seed=seed, **extra)
    return Case(**{**base, **kw})


def hint_of(c: Case, module: str) -> tuple[Outcome, str]:
    kernel = getattr(importlib.import_module(module), c.op)
    ci = generate(c)
    golden = goldens.compute(c.op, ci.args, exact=True)
    launched = launch(kernel, ci, CPU, lambda: None)
    found = checks.run_checks(c, ci, golden, launched)
    return found.outcome, hints.find_hint(c, ci, golden, launched, found, torch.float32)


@pytest.mark.parametrize("module, expected, op", [
    *(("harness.kernels.mutants.gptj_rope", GPTJ, op) for op in ROPE_OPS),
    *(("harness.kernels.mutants.skip_rope", SKIPPED, op) for op in ROPE_OPS),
    *((module, expected, op) for module, expected in (("outside.rope_pairs", GPTJ), ("outside.no_rope", SKIPPED),
                                                      ("outside.rope_next_position", LATE))
      for op in ("rope_kv_write", "fused_rope_decode_attention", "prefill_attention")),
    ("outside.rope_next_position", LATE, "decode_layers"),
])
def test_a_rope_bug_gets_its_hint(module, expected, op):
    outcome, hint = hint_of(case(op), module)
    assert outcome is Outcome.MISMATCH
    assert hint.startswith(expected + " (in "), hint
    named = hint.removeprefix(expected + " (in ").removesuffix(")").split(", ")
    # the tensors it is about: what the bug changes (every RoPE bug moves the k rows)
    assert "k_cache" in named and (op in ("decode_layers", "prefill_attention") or "query" in named), hint


@pytest.mark.parametrize("module", ["harness.kernels.mutants.returns_query", "outside.query_into_out"])
def test_a_wrong_buffer_says_which_golden_it_holds(module):
    outcome, hint = hint_of(case("fused_rope_decode_attention"), module)
    if module.endswith("returns_query"):        # out never written: poison, not the query
        assert outcome is not Outcome.MISMATCH and hint == ""
    else:
        assert outcome is Outcome.MISMATCH and hint == "out holds what query should"


@pytest.mark.parametrize("module, ops", [
    ("harness.kernels.reference", ROPE_OPS + ("paged_decode_attention",)),
    ("outside.exact_round_once", ROPE_OPS + ("paged_decode_attention",)),
    ("outside.torch_sdpa", ("fused_rope_decode_attention", "prefill_attention")),
    ("outside.wrong_gqa", ("fused_rope_decode_attention", "paged_decode_attention")),
    ("outside.missed_first_key", ("fused_rope_decode_attention", "prefill_attention")),
    ("outside.unweighted_k_norm", ("rope_kv_write", "fused_rope_decode_attention")),
])
def test_no_hint_for_a_correct_kernel_or_an_unrelated_bug(module, ops):
    for op in ops:
        outcome, hint = hint_of(case(op), module)
        assert hint == "", (op, outcome, hint)
        if module.startswith("outside.") and module not in ("outside.exact_round_once", "outside.torch_sdpa") \
                or "mutants" in module:
            assert outcome is not Outcome.PASS or op == "paged_decode_attention", (op, "the bug must show")


@pytest.mark.parametrize("module, expected", [
    # reads position seq_len-1 before writing it: the row still holds its canary
    ("harness.kernels.mutants.stale_kv", "reads cache rows before writing them: out[0, 0] equals the canary value "
                                         "row of slot "),
    # reads the page after the right one: here a page no sequence owns
    ("harness.kernels.mutants.off_by_one_page", "reads outside the sequence: out["),
])
def test_a_read_of_a_row_it_must_not_read_is_named_as_what_it_is(module, expected):
    outcome, hint = hint_of(case("fused_rope_decode_attention"), module)
    assert outcome is Outcome.MISMATCH and hint.startswith(expected), hint
    own = ", which this launch writes" in hint
    assert own == module.endswith("stale_kv"), hint


def test_a_wrong_buffer_is_not_called_a_stray_read():
    """The rotated query in out can exceed every readable value: the other golden explains it first."""
    outcome, hint = hint_of(case("fused_rope_decode_attention"), "outside.query_into_out")
    assert outcome is Outcome.MISMATCH and "reads" not in hint


def test_an_audits_mutant_run_gets_no_hint():
    """The audit reads only outcomes: its mutant runs (their env names the operator) compute none."""
    c = replace(case("fused_rope_decode_attention"), env={"HARNESS_MUTANT": "head_perturbed"})
    outcome, hint = hint_of(c, "outside.rope_pairs")
    assert outcome is Outcome.MISMATCH and hint == ""
