"""The inputs a case generates (``harness.worker.inputs.generate``), against docs/contracts.md and ``harness.ops``.

What the checks and the goldens rely on: the attention scale, every argument's shape and
dtype, one seed one set of bytes, the slot and sequence-length modes, warmup's single
page, caches that hold valid context only where the op reads it and a canary elsewhere,
and NeoX RoPE tables.
"""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from harness.case import PRESETS, Case, SeqLens, SlotMode, multi_block_lengths
from harness.ops import OPS
from harness.worker.inputs import generate

TINY = PRESETS["tiny"]
P = TINY.page_size
DECODE_OPS = ("rope_kv_write", "paged_decode_attention", "fused_rope_decode_attention", "decode_layers")
PAGED_DECODE_OPS = tuple(op for op in DECODE_OPS if "block_table" in OPS[op].arg_names)
SLOTTED_DECODE_OPS = tuple(op for op in DECODE_OPS if "slot_mapping" in OPS[op].arg_names)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "int32": torch.int32}


def make_case(op: str = "fused_rope_decode_attention", **fields) -> Case:
    base = dict(case_id="c", matrix="m", source="m.yaml:1", op=op, kernel="reference", geometry=TINY,
                seq_lens=SeqLens("multi_block"), slot_mode=SlotMode("arange"), seed=7)
    return Case(**{**base, **fields})


def tensors(args: dict) -> dict[str, torch.Tensor]:
    return {name: value for name, value in args.items() if isinstance(value, torch.Tensor)}


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bytes(a.contiguous().view(torch.uint8).numpy()) == \
        bytes(b.contiguous().view(torch.uint8).numpy())


def context_positions(case: Case, seq_len: int) -> int:
    """How many leading positions of a sequence the contract says hold valid context before launch."""
    return seq_len if case.op == "paged_decode_attention" else seq_len - 1


# -- scalars ----------------------------------------------------------------------------------

@pytest.mark.parametrize("op", [op for op, spec in OPS.items() if "scale" in spec.arg_names])
@pytest.mark.parametrize("head_dim", [16, 32, 64])
def test_scale_is_one_over_sqrt_head_dim(op, head_dim):
    args = generate(make_case(op, geometry=replace(TINY, head_dim=head_dim))).args
    assert args["scale"] == pytest.approx(1 / math.sqrt(head_dim), rel=1e-12)
    assert isinstance(args["scale"], float)


@pytest.mark.parametrize("op", [op for op, spec in OPS.items() if "eps" in spec.arg_names])
def test_eps_and_layer_count_come_from_the_geometry(op):
    geometry = replace(TINY, eps=1e-5, num_layers=3)
    args = generate(make_case(op, geometry=geometry)).args
    assert args["eps"] == 1e-5
    if "num_layers" in OPS[op].arg_names:
        assert args["num_layers"] == 3 and isinstance(args["num_layers"], int)


# -- shapes and dtypes: exactly what harness.ops declares -------------------------------------

def expected_shape(symbols: tuple[str, ...], case: Case, rows: int) -> tuple[int, ...]:
    g = case.geometry
    sizes = {"B": g.batch, "Hq": g.num_heads, "Hkv": g.num_kv_heads, "D": g.head_dim, "P": g.page_size,
             "N": case.num_pages, "MB": case.max_blocks, "T": rows, "H": g.hidden, "I": g.intermediate,
             "V": g.vocab, "L": g.num_layers, "max_pos": case.max_pos}

    def size(symbol: str) -> int:          # a number, a name, a product (Hq*D), a name plus a number (B+1)
        if symbol.isdigit():
            return int(symbol)
        if "+" in symbol:
            name, extra = symbol.split("+")
            return sizes[name] + int(extra)
        return math.prod(sizes[name] for name in symbol.split("*"))

    return tuple(size(symbol) for symbol in symbols)


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_argument_has_the_declared_shape_and_dtype(op):
    case = make_case(op, geometry=replace(TINY, num_layers=2), chunk_size=8 if op == "prefill_attention" else None)
    ci = generate(case)
    # Prefill: T tokens, a chunk of 8 from each sequence (every multi_block length is >= P - 1 = 15).
    rows = case.geometry.batch * (8 if op == "prefill_attention" else 1)
    assert set(ci.args) == {a.name for a in OPS[op].args if a.role != "output"}
    for arg in OPS[op].args:
        if arg.role == "scalar":
            assert isinstance(ci.args[arg.name], {"float": float, "int": int}[arg.dtype]), arg.name
        elif arg.role == "output":
            assert ci.outputs[arg.name] == (expected_shape(arg.shape, case, rows), DTYPES[arg.dtype]), arg.name
        else:
            value = ci.args[arg.name]
            assert tuple(value.shape) == expected_shape(arg.shape, case, rows), arg.name
            assert value.dtype == DTYPES[arg.dtype], arg.name
            assert value.device.type == "cpu"
    assert set(ci.outputs) == {a.name for a in OPS[op].outputs}


# -- determinism --------------------------------------------------------------------------------

@pytest.mark.parametrize("op", sorted(OPS))
def test_same_seed_same_bytes(op):
    case = make_case(op, slot_mode=SlotMode("padded", 0.5), seq_lens=SeqLens("uniform", (1, 40)))
    a, b = generate(case), generate(case)
    assert a.args.keys() == b.args.keys()
    for name, value in tensors(a.args).items():
        assert same_bytes(value, b.args[name]), name
    assert torch.equal(a.slots, b.slots) and a.spec == b.spec


@pytest.mark.parametrize("op", sorted(OPS))
def test_another_seed_other_bytes(op):
    case = make_case(op, slot_mode=SlotMode("random"))
    a, b = tensors(generate(case).args), tensors(generate(case.with_seed(8)).args)
    for name in (c.name for c in OPS[op].caches):       # an op of another pack may have none
        assert not same_bytes(a[name], b[name]), name
    random_inputs = [a.name for a in OPS[op].by_role("input") if a.dtype != "int32" and not a.name.startswith("rope_")]
    for name in random_inputs:
        assert not same_bytes(a[name], b[name]), name


# -- slot modes ----------------------------------------------------------------------------------

def mapped_slots(args: dict) -> list[int]:
    """The slot each decode row's new token maps to: its last position, through the block table."""
    slots = []
    for b, s in enumerate(args["seq_lens"].tolist()):
        page = int(args["block_table"][b, (s - 1) // P])
        slots.append(page * P + (s - 1) % P)
    return slots


@pytest.mark.parametrize("op", DECODE_OPS)
def test_arange_gives_consecutive_pages_in_batch_order(op):
    """Sequences of 20, 5, 33, 16 tokens take pages 0-1, 2, 3-5, 6; the new token is the last one."""
    case = make_case(op, seq_lens=SeqLens("list", (20, 5, 33, 16)))
    args = generate(case).args
    if "block_table" in args:
        assert args["block_table"].tolist() == [[0, 1, -1], [2, -1, -1], [3, 4, 5], [6, -1, -1]]
    if "slot_mapping" in args:
        assert args["slot_mapping"].tolist() == [1 * P + 3, 2 * P + 4, 5 * P + 0, 6 * P + 15]
        assert args["positions"].tolist() == [19, 4, 32, 15]


@pytest.mark.parametrize("op", PAGED_DECODE_OPS)
def test_random_uses_distinct_pages_in_a_seeded_order(op):
    case = make_case(op, slot_mode=SlotMode("random"), geometry=replace(TINY, batch=8))
    args = generate(case).args
    table = args["block_table"]
    pages = table[table >= 0].tolist()
    needed = sum(math.ceil(s / P) for s in args["seq_lens"].tolist())
    assert len(pages) == len(set(pages)) == needed
    assert all(0 <= p < case.num_pages for p in pages)
    assert pages != sorted(pages)                       # not arange's order
    if "slot_mapping" in args:
        assert args["slot_mapping"].tolist() == mapped_slots(args)


@pytest.mark.parametrize("op", SLOTTED_DECODE_OPS)
def test_const_slot_gives_every_row_that_slot(op):
    ci = generate(make_case(op, slot_mode=SlotMode("const", -1)))
    assert ci.args["slot_mapping"].tolist() == [-1] * TINY.batch
    assert not ci.valid_rows.any()


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75])
def test_padded_sets_that_fraction_of_rows_to_minus_one_and_keeps_the_rest(fraction):
    geometry = replace(TINY, batch=8)
    padded = generate(make_case(slot_mode=SlotMode("padded", fraction), geometry=geometry))
    plain = generate(make_case(slot_mode=SlotMode("arange"), geometry=geometry))
    slots, mapped = padded.args["slot_mapping"], plain.args["slot_mapping"]
    assert int((slots == -1).sum()) == round(fraction * 8)
    kept = slots >= 0
    assert torch.equal(slots[kept], mapped[kept])
    assert padded.valid_rows.tolist() == kept.tolist()


def test_prefill_slots_are_per_token():
    case = make_case("prefill_attention", seq_lens=SeqLens("list", (20, 5, 33, 16)), chunk_size=8)
    args = generate(case).args
    table = args["block_table"]
    expected = [int(table[b, p // P]) * P + p % P
                for b, s in enumerate((20, 5, 33, 16)) for p in range(s - min(8, s), s)]
    assert args["slot_mapping"].tolist() == expected


# -- sequence lengths ----------------------------------------------------------------------------

def test_const_and_list_seq_lens():
    assert generate(make_case(seq_lens=SeqLens("const", (9,)))).args["seq_lens"].tolist() == [9] * TINY.batch
    assert generate(make_case(seq_lens=SeqLens("list", (3, 1, 4, 15)))).args["seq_lens"].tolist() == [3, 1, 4, 15]


def test_uniform_seq_lens_stay_in_range_and_vary():
    case = make_case(seq_lens=SeqLens("uniform", (3, 40)), geometry=replace(TINY, batch=16))
    lens = generate(case).args["seq_lens"].tolist()
    assert all(3 <= s <= 40 for s in lens) and len(set(lens)) > 1
    assert lens != generate(case.with_seed(8)).args["seq_lens"].tolist()


@pytest.mark.parametrize("op", PAGED_DECODE_OPS)
def test_multi_block_covers_every_page_boundary_shape_before_repeating(op):
    choices = multi_block_lengths(P)
    case = make_case(op, geometry=replace(TINY, batch=len(choices) + 2))
    args = generate(case).args
    lens = args["seq_lens"].tolist()
    assert sorted(lens[:len(choices)]) == sorted(choices)
    assert set(lens[len(choices):]) <= set(choices)
    assert {P - 1, P, P + 1} <= set(lens)                # just before, on and just after a boundary
    for b, s in enumerate(lens):
        row = args["block_table"][b].tolist()
        used = math.ceil(s / P)
        assert all(p >= 0 for p in row[:used]) and all(p == -1 for p in row[used:]), (s, row)


def test_prefill_chunks_split_each_sequence_into_context_and_new_tokens():
    case = make_case("prefill_attention", seq_lens=SeqLens("list", (20, 5, 33, 16)), chunk_size=8)
    args = generate(case).args
    assert args["context_lens"].tolist() == [12, 0, 25, 8]
    assert args["cu_seqlens"].tolist() == [0, 8, 13, 21, 29]
    assert args["positions"].tolist() == [*range(12, 20), *range(0, 5), *range(25, 33), *range(8, 16)]
    whole = generate(replace(case, chunk_size=None)).args
    assert whole["context_lens"].tolist() == [0, 0, 0, 0]
    assert whole["cu_seqlens"].tolist() == [0, 20, 25, 58, 74]


# -- warmup (block_value) and scratch pages ------------------------------------------------------

@pytest.mark.parametrize("op", DECODE_OPS)
def test_block_value_puts_every_block_on_that_page(op):
    ci = generate(make_case(op, seq_lens=SeqLens("const", (20,)), block_value=3))
    if "block_table" in ci.args:
        assert (ci.args["block_table"] == 3).all()
    if "slot_mapping" in ci.args:
        assert {slot // P for slot in ci.args["slot_mapping"].tolist()} == {3}


@pytest.mark.parametrize("op", DECODE_OPS)
def test_scratch_pages_sizes_the_cache(op):
    ci = generate(make_case(op, seq_lens=SeqLens("const", (20,)), block_value=0, scratch_pages=1))
    assert ci.args["k_cache"].shape[-4] == ci.args["v_cache"].shape[-4] == 1
    default = generate(make_case(op, seq_lens=SeqLens("const", (20,))))
    assert default.args["k_cache"].shape[-4] == TINY.batch * 2          # B sequences of 2 pages each


# -- caches: context where the op reads it, a canary everywhere else ----------------------------

def context_rows(case: Case, args: dict) -> set[int]:
    rows = set()
    if case.op == "prefill_attention":
        counts = args["context_lens"].tolist()
    else:
        counts = [context_positions(case, s) for s in args["seq_lens"].tolist()]
    for b, count in enumerate(counts):
        for p in range(count):
            rows.add(int(args["block_table"][b, p // P]) * P + p % P)
    return rows


@pytest.mark.parametrize("op", [op for op in sorted(OPS) if "block_table" in OPS[op].arg_names])
def test_caches_hold_context_only_where_it_is_read_and_a_canary_elsewhere(op):
    case = make_case(op, slot_mode=SlotMode("random"), chunk_size=8 if op == "prefill_attention" else None)
    ci = generate(case)
    valid = context_rows(case, ci.args)
    assert valid, "the case has context to check"
    for name in ("k_cache", "v_cache"):
        cache = ci.args[name].float()
        layers = cache if cache.dim() == 5 else cache.unsqueeze(0)
        for layer in layers:
            rows = layer.reshape(-1, *layer.shape[-2:])
            is_context = torch.zeros(rows.shape[0], dtype=torch.bool)
            is_context[sorted(valid)] = True
            # Context rows are N(0, spread) keys and N(0, 1) values.  Canary values lie beyond
            # 16 (beyond 10 on average for decode_layers' cold canary); a hot canary key is
            # small but for its slowest RoPE pair.
            assert rows[is_context].abs().mean() < 1.2 * (1.5 if name == "k_cache" else 1), name
            canary = rows[~is_context]
            hot_key = name == "k_cache" and op != "decode_layers"
            if hot_key:
                pair = [case.geometry.head_dim // 2 - 1, case.geometry.head_dim - 1]
                assert (canary[..., pair] > 20).all() and (canary[..., :pair[0]].abs() <= 1).all(), name
            else:
                assert canary.abs().mean() > 10, name
            # The rows the new tokens go to hold the canary, not context: the kernel must write them.
            if OPS[op].writes_cache:
                written = rows[ci.slots[ci.slots >= 0]]
                assert ((written[..., pair] > 20).all() if hot_key else written.abs().mean() > 10), name
    assert not torch.equal(ci.args["k_cache"], ci.args["v_cache"])


def test_layered_caches_hold_context_in_every_layer():
    case = make_case("decode_layers", geometry=replace(TINY, num_layers=3))
    cache = generate(case).args["k_cache"]
    layer_rows = cache.reshape(3, -1, *cache.shape[-2:])
    row = min(context_rows(case, generate(case).args))
    assert not torch.equal(layer_rows[0, row], layer_rows[1, row])         # one draw per layer
    assert all(layer_rows[i, row].float().abs().mean() < 3 for i in range(3))



@pytest.mark.parametrize("first,count", [(0, 1), (5, 100), (4090, 4096), (0, 3 * 4096 + 17), (12345, 5 * 4096)])
def test_the_canary_repeats_its_period_from_the_element_it_starts_at(first, count):
    # the bug this exists for: a window copied from the wrong phase (the canary shifted
    # within a run, so one run's bytes depend on where another run ended)
    from harness.packs.qwen3 import inputs as inputs_module
    period = torch.arange(inputs_module._CANARY_PERIOD, dtype=torch.float32)
    target = torch.full((count,), -1.0)
    inputs_module._tile_canary(target, first, period.repeat(inputs_module._CANARY_REPEATS))
    expected = period[(torch.arange(count) + first) % inputs_module._CANARY_PERIOD]
    assert torch.equal(target, expected)

# -- RoPE tables -----------------------------------------------------------------------------------

@pytest.mark.parametrize("theta", [10_000.0, 1_000_000.0])
def test_rope_tables_are_neox_with_the_geometry_theta(theta):
    case = make_case(geometry=replace(TINY, rope_theta=theta))
    args = generate(case).args
    cos, sin = args["rope_cos"], args["rope_sin"]
    D, half = TINY.head_dim, TINY.head_dim // 2
    assert cos.shape == sin.shape == (case.max_pos, D) and cos.dtype == sin.dtype == torch.float32
    assert torch.equal(cos[:, :half], cos[:, half:]) and torch.equal(sin[:, :half], sin[:, half:])
    assert torch.equal(cos[0], torch.ones(D)) and torch.equal(sin[0], torch.zeros(D))
    for pos, i in [(1, 0), (5, 3), (case.max_pos - 1, half - 1)]:
        angle = pos * theta ** (-2 * i / D)
        assert float(cos[pos, i]) == pytest.approx(math.cos(angle), abs=1e-6)
        assert float(sin[pos, i]) == pytest.approx(math.sin(angle), abs=1e-6)
