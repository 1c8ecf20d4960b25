"""Signal-aware inputs and hot canaries (docs/cases.md "attention", docs/contracts.md "What the
kernel finds in its buffers"): the attention axis shapes the logits, the rows a case must not
read hold canaries every query scores far above any real key, and in process (inputs ->
golden -> kernel -> checks, as a worker runs them) correct kernels pass at every sharpness
while bound bugs fail, the stray reads named as such."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from harness.case import ATTENTION_SPREADS, PRESETS, Case, SeqLens, SlotMode
from harness.casefiles import load_paths
from harness.casefiles.values import CaseFileError
from harness.kernels.reference import apply_rope, qk_norm, rope_rows
from harness.worker.inputs import generate
from harness.packs.qwen3.inputs import CANARY_VALUE_MIN

from helpers import case_runner, outside_kernels_on_path, write_case_file

TINY = PRESETS["tiny"]
LENGTHS = SeqLens("list", (320, 319, 321, 100))        # 20 pages, boundaries either side, a short one


def make_case(op: str, attention: str = "peaked", seq_lens: SeqLens = LENGTHS, **fields) -> Case:
    return Case("c", "m", "m.yaml:1", op, "reference", TINY, seq_lens, SlotMode("random"), seed=5,
                attention=attention, chunk_size=16 if op == "prefill_attention" else None, **fields)


def queries(case: Case, args) -> torch.Tensor:
    """q after the norm and RoPE, as the cache's keys meet it (bf16)."""
    g = case.geometry
    if case.op == "paged_decode_attention":
        return args["query"].float()
    cos, sin = rope_rows(args["rope_cos"], args["rope_sin"], args["positions"])
    q = args["q_proj"].float() * args["inv_rms"].float()
    return apply_rope(qk_norm(q.view(len(q), g.num_heads, g.head_dim), args["q_norm_weight"], g.eps), cos, sin
                      ).bfloat16().float()


def scores(case: Case, args) -> tuple[torch.Tensor, torch.Tensor]:
    """(every query's scores against every canary row, against every context row)."""
    keys, values = args["k_cache"].float(), args["v_cache"].float()
    Hkv, D = keys.shape[-2:]
    keys, values = keys.reshape(-1, Hkv, D), values.reshape(-1, Hkv, D)
    canary = (values.abs() >= CANARY_VALUE_MIN).all(-1)[:, 0]
    q = queries(case, args)
    s = torch.einsum("rhgd,shd->rhgs", q.view(len(q), Hkv, -1, D), keys) / math.sqrt(D)
    return s[..., canary], s[..., ~canary]


@pytest.mark.parametrize("attention", sorted(ATTENTION_SPREADS))
@pytest.mark.parametrize("op", ["paged_decode_attention", "fused_rope_decode_attention", "prefill_attention"])
def test_canary_keys_outscore_every_real_key_of_every_query(op, attention):
    case = make_case(op, attention)
    hot, real = scores(case, generate(case).args)
    assert hot.numel() and real.numel()
    assert float(hot.min()) > float(real.max()) + 10        # e^-10 of the weight left to the real keys
    assert float(hot.max()) < 80                            # exp stays finite even unnormalised in float32


def test_logits_spread_as_the_axis_says():
    spreads = {}
    for attention in ATTENTION_SPREADS:
        case = make_case("paged_decode_attention", attention)
        _, real = scores(case, generate(case).args)
        spreads[attention] = float(real.std())
    for attention, spread in ATTENTION_SPREADS.items():
        assert abs(spreads[attention] / spread - 1) < 0.2, spreads


def test_values_a_sequence_may_read_stay_far_below_the_canary_values():
    case = make_case("fused_rope_decode_attention")
    args = generate(case).args
    rows = args["v_cache"].float().reshape(-1, TINY.head_dim)
    canary = (rows.abs() >= CANARY_VALUE_MIN).all(-1)
    assert canary.any() and (rows[~canary].abs() < 6.7).all()
    assert (args["v_proj"].float() * args["inv_rms"].float()).abs().max() < 6.7


@pytest.mark.parametrize("slot_mode", ["arange", "random"])
def test_what_a_minus_one_entry_reaches_is_owned_by_no_sequence(slot_mode):
    case = replace(make_case("paged_decode_attention"), slot_mode=SlotMode(slot_mode))
    table = generate(case).args["block_table"]
    assert (table == -1).any()
    assert not (table == case.num_pages - 1).any()


def test_the_axis_in_a_case_file(tmp_path):
    path = write_case_file(tmp_path, "a.yaml", """\
        op: paged_decode_attention
        matrix:
          attention: [uniform, sharp]
        """)
    cases = load_paths([path])
    assert [c.attention for c in cases] == ["uniform", "sharp"]
    assert [c.case_id for c in cases] == ["a[attention=uniform]", "a[attention=sharp]"]
    assert load_paths([write_case_file(tmp_path, "b.yaml", "op: paged_decode_attention\n")])[0].attention == "peaked"
    bad = write_case_file(tmp_path, "c.yaml", "op: paged_decode_attention\nattention: peaky\n")
    with pytest.raises(CaseFileError, match=r"c.yaml:2:\d+: attention: unknown attention 'peaky'.*peaked"):
        load_paths([bad])


def test_the_golden_key_follows_the_axis():
    a, b = generate(make_case("paged_decode_attention", "uniform")), generate(make_case("paged_decode_attention"))
    assert a.spec["attention"] == "uniform" and b.spec["attention"] == "peaked"
    assert not torch.equal(a.args["query"], b.args["query"])


# -- in process: inputs -> golden -> kernel -> checks -------------------------------------------

@pytest.fixture(scope="module")
def run(tmp_path_factory):
    one_case = case_runner(tmp_path_factory.mktemp("goldens"))
    with outside_kernels_on_path():
        yield lambda case, kernel: one_case(replace(case, kernel=kernel))


@pytest.mark.parametrize("attention", sorted(ATTENTION_SPREADS))
@pytest.mark.parametrize("kernel,op", [
    ("reference", "paged_decode_attention"), ("reference", "fused_rope_decode_attention"),
    ("reference", "prefill_attention"),
    ("outside.tiled_masked:paged_decode_attention", "paged_decode_attention"),
    ("outside.tiled_masked:fused_rope_decode_attention", "fused_rope_decode_attention"),
])
def test_correct_kernels_pass_at_every_sharpness(run, kernel, op, attention):
    assert run(make_case(op, attention), kernel)[0] == "PASS"


STRAY = ("one_key_too_many", "unmasked_tail", "block_too_many")


@pytest.mark.parametrize("mutant", ("one_key_too_few", "off_by_one_page") + STRAY)
@pytest.mark.parametrize("op", ["paged_decode_attention", "fused_rope_decode_attention", "prefill_attention"])
def test_bound_bugs_fail_a_long_case(run, op, mutant):
    if mutant == "off_by_one_page" and op == "paged_decode_attention":
        pytest.skip("off_by_one_page has no paged_decode_attention")
    outcome, summary = run(make_case(op), f"mutant:{mutant}")
    assert outcome == "MISMATCH", summary
    if mutant in STRAY:
        # a read one past the cached keys of a decode or prefill chunk can land on the row the
        # launch itself writes (the current token's), still holding its canary: named as that
        phrases = ("reads outside the sequence",) if op == "paged_decode_attention" else (
            "reads outside the sequence", "reads cache rows before writing them")
        assert any(p in summary for p in phrases), summary
    elif mutant == "one_key_too_few":       # reads fewer rows, none outside: no such claim
        assert "reads outside" not in summary, summary
    # off_by_one_page reads the next page: another sequence's (no claim) or one nobody owns (named)
