"""OOB_WRITE names the rows whose slot < 0 put a write in a cache's guard band, in process on tiny cases.

The story: a serving warmup passes ``slot_mapping = -1`` for padding rows and the kernel
writes their K/V rows anyway (``base + slot * row``), one row before the cache.  The
report must name those rows; a write no row's slot explains is said to be unattributable.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from harness import goldens
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.kernels import reference
from harness.kernels.mutants import unguarded_slot_write
from harness.outcomes import Outcome
from harness.worker import checks
from harness.worker.inputs import generate
from harness.worker.launch import launch

CPU = torch.device("cpu")
TINY = PRESETS["tiny"]
ROW = TINY.num_kv_heads * TINY.head_dim          # elements in one cache row: 64


def case(op: str = "rope_kv_write", **kw) -> Case:
    base = dict(case_id="t", matrix="t", source="t", op=op, kernel="reference",
                geometry=replace(TINY, batch=8), seq_lens=SeqLens("multi_block"),
                slot_mode=SlotMode("padded", 0.5), seed=5)
    return Case(**{**base, **kw})


def run(c: Case, kernel) -> checks.Findings:
    ci = generate(c)
    return checks.run_checks(c, ci, goldens.compute(c.op, ci.args), launch(kernel, ci, CPU, lambda: None))


def padding_rows(c: Case) -> list[int]:
    return (generate(c).slots < 0).nonzero().flatten().tolist()


def test_a_write_for_slot_minus_one_names_the_padding_rows():
    c = case()
    rows = padding_rows(c)
    assert 1 < len(rows) < 8
    found = run(c, unguarded_slot_write.rope_kv_write)
    assert found.outcome is Outcome.OOB_WRITE, found.report
    listed = ", ".join(map(str, rows))
    for name in ("k_cache", "v_cache"):
        assert (f"{name}: guard band overwritten: rows {listed} (slot -1): {ROW} elements before the start "
                f"of {name} (offsets -{ROW}..-1)") in found.report


def test_prefill_names_tokens_and_a_long_list_is_cut_with_its_count():
    c = case("prefill_attention", chunk_size=8)
    tokens = padding_rows(c)
    assert len(tokens) > 8
    found = run(c, unguarded_slot_write.prefill_attention)
    shown = ", ".join(map(str, tokens[:8]))
    assert found.summary == (f"k_cache: guard band overwritten: tokens {shown}, ... ({len(tokens)} tokens with "
                             f"slot -1): {ROW} elements before the start of k_cache (offsets -{ROW}..-1)")


def test_warmup_every_row_minus_one():
    c = case("fused_rope_decode_attention", geometry=replace(TINY, batch=16), seq_lens=SeqLens("const", (1,)),
             slot_mode=SlotMode("const", -1), scratch_pages=1, block_value=0)
    found = run(c, unguarded_slot_write.fused_rope_decode_attention)
    assert found.summary.startswith("k_cache: guard band overwritten: rows 0, 1, 2, 3, 4, 5, 6, 7, ... "
                                    "(16 rows with slot -1): 64 elements before the start of k_cache"), found.summary


def test_per_layer_cache_attributes_layer_zero_and_the_later_layers_stay_contract():
    # Layer l > 0 writes slot -1 into layer l-1's last row: inside the buffer, a CONTRACT finding.
    c = case("decode_layers", geometry=replace(TINY, batch=8, num_layers=2))
    found = run(c, unguarded_slot_write.decode_layers)
    assert f"(slot -1): {ROW} elements before the start of k_cache" in found.summary, found.summary
    assert any(f.outcome is Outcome.CONTRACT and "layer 0 slot" in f.message for f in found.items), found.report


def test_a_write_past_the_end_is_not_attributed():
    def writes_past_v_cache(**kw):
        reference.rope_kv_write(**kw)
        cache = kw["v_cache"]
        torch.as_strided(cache, (ROW,), (1,), cache.storage_offset() + cache.numel()).fill_(1.0)

    c = case()
    numel = generate(c).args["v_cache"].numel()
    found = run(c, writes_past_v_cache)
    assert found.outcome is Outcome.OOB_WRITE
    assert found.summary == (f"v_cache: guard band overwritten: {ROW} elements after the end of v_cache "
                             f"(offsets {numel}..{numel + ROW - 1}), not attributable to a row")


def test_a_write_no_negative_slot_explains_is_kept_apart_from_the_rows_that_explain_theirs():
    def unguarded_and_far_before(**kw):
        unguarded_slot_write.rope_kv_write(**kw)
        cache = kw["k_cache"]
        torch.as_strided(cache, (4,), (1,), cache.storage_offset() - 3 * ROW).fill_(1.0)   # slot -3: no row has it

    c = case()
    listed = ", ".join(map(str, padding_rows(c)))
    found = run(c, unguarded_and_far_before)
    assert found.summary == (f"k_cache: guard band overwritten: rows {listed} (slot -1): {ROW} elements before "
                             f"the start of k_cache (offsets -{ROW}..-1); 4 elements before the start of k_cache "
                             f"(offsets -{3 * ROW}..-{3 * ROW - 3}), not attributable to a row")


def test_correct_kernels_write_no_guard_band():
    for op in ("rope_kv_write", "fused_rope_decode_attention", "prefill_attention", "decode_layers"):
        found = run(case(op, chunk_size=8 if op == "prefill_attention" else None), getattr(reference, op))
        assert found.outcome is Outcome.PASS, (op, found.report)
