"""Intermediates and hints honest on every row (docs/intermediates.md, docs/contracts.md "Hints"),
on outside kernels (tests/outside_kernels/outside/tool_dumps.py): an intermediate is judged on
the rows its output is, a row with nothing compared says so, a hint needs its own evidence
on the kernel's data and names its tensor, and no finding repeats unsafe advice."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.intermediates import files
from harness.outcomes import Outcome
from helpers import outside_kernels_in_process


def case(kernel: str, *, batch: int = 4, seq: int = 9, slots: SlotMode = SlotMode("arange"), **kw) -> Case:
    return Case(f"fused[{kernel}]", "unit", "unit", "fused_rope_decode_attention", f"outside.tool_dumps:{kernel}",
                replace(PRESETS["tiny"], batch=batch), SeqLens("const", (seq,)), slots, 1, **kw)


def scratch(kernel: str) -> Case:
    """fused-decode[warmup-scratch]'s shape: every row padding (slot -1), one scratch page."""
    return case(kernel, batch=16, seq=1, slots=SlotMode("const", -1), scratch_pages=1, block_value=0)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    with outside_kernels_in_process(tmp_path_factory.mktemp("goldens")) as run:
        yield lambda c, mode="on-failure": run(c, intermediates=mode)


def verdicts(reply) -> dict[str, str]:
    return {r["name"]: r["verdict"] for r in reply.metrics["intermediates"]["rows"]}


def test_a_q_bug_on_padding_rows_is_found_in_q_not_blamed_on_the_store(run):
    """query is judged on every row, padding too; so are q_norm and q_rope.  k, v and attn are
    judged on none there: they say so instead of 'bit-exact after 0 elements'."""
    reply = run(scratch("k_weight_on_q"))
    assert reply.outcome is Outcome.MISMATCH and reply.summary.startswith("query:")
    assert reply.metrics["intermediates"]["first_bad_intermediate"] == "q_norm"
    v = verdicts(reply)
    assert v["q_rope"] == "inherited"
    assert {v[n] for n in ("k_norm", "k_rope", "v", "attn")} == {"not compared"}
    assert "not compared (every row padding)" in reply.summary and "the store" not in reply.summary


def test_a_correct_kernel_on_padding_rows_passes_with_nothing_claimed_of_the_rows_not_compared(run):
    reply = run(scratch("flat_dumps"), "always")
    assert reply.outcome is Outcome.PASS
    v = verdicts(reply)
    assert v["q_norm"] in ("ok", "bit-exact") and v["attn"] == "not compared"


def test_an_unscaled_v_is_no_stray_read(run):
    """out reaches past every readable value row by the kernel's own arithmetic (v_proj without
    inv_rms): no canary proves a read, so no 'reads outside the sequence'."""
    reply = run(case("unscaled_v", batch=16, seq=1))
    assert reply.outcome is Outcome.MISMATCH
    assert reply.hint == "" and "reads" not in reply.summary, reply.summary
    assert reply.metrics["intermediates"]["first_bad_intermediate"] == "v"


class Evil:
    """A class weights_only=True will not unpickle."""


def test_a_corrupt_pt_dump_is_named_without_unsafe_advice(tmp_path):
    (tmp_path / "q_norm.pt").write_bytes(b"PK\x03\x04 not really a zip")
    torch.save({"x": Evil()}, tmp_path / "k_norm.pt")       # a pickle weights_only refuses
    for name in ("q_norm.pt", "k_norm.pt"):
        problem = files.read(tmp_path / name, 1 << 20)
        assert isinstance(problem, files.Problem)
        assert "weights_only=False" not in problem.message and "trust" not in problem.message, problem.message
