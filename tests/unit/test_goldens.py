"""Hand-checkable properties of the goldens (docs/contracts.md), not a second implementation.

Inputs come from ``harness.worker.inputs.generate`` on the tiny preset (Hq 4, Hkv 2,
D 32, P 16), or are built by hand where a property needs exact numbers.
"""
from __future__ import annotations

import copy
import math
import re
from dataclasses import replace

import pytest
import torch

from harness import goldens
from harness.goldens import GoldenInputError
from harness.ops import OPS
from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.worker.inputs import generate

TINY = PRESETS["tiny"]
GEOMETRY_FIELDS = set(TINY.__dataclass_fields__)
ATTENTION_OPS = ("paged_decode_attention", "fused_rope_decode_attention", "prefill_attention", "decode_layers")


def make_case(op: str, seq_lens=SeqLens("uniform", (1, 60)), slot_mode=SlotMode("arange"), seed=1,
              **overrides) -> Case:
    geometry = replace(TINY, **{k: v for k, v in overrides.items() if k in GEOMETRY_FIELDS})
    extra = {k: v for k, v in overrides.items() if k not in GEOMETRY_FIELDS}
    if op == "prefill_attention":
        extra.setdefault("chunk_size", 8)
    return Case(f"{op}[seed={seed}]", "unit", "tests/unit/test_goldens.py", op, "reference", geometry,
                seq_lens, slot_mode, seed, **extra)


def case_args(op: str, **kw) -> dict:
    return generate(make_case(op, **kw)).args


def run(op: str, args: dict, dtype=torch.float64) -> dict[str, torch.Tensor]:
    return goldens.compute(op, args, dtype)


def kv_head_of(num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """The contract's GQA mapping: query head h reads KV head h // (Hq / Hkv)."""
    return torch.arange(num_heads) // (num_heads // num_kv_heads)


def to_bf16_and_back(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(x.dtype)


# -- interface --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("op", goldens.ops())
def test_every_output_in_full_shape_and_dtype(op, dtype):
    inputs = generate(make_case(op))
    result = goldens.compute(op, inputs.args, dtype)
    assert tuple(result) == goldens.output_names(op)
    for name, (shape, _) in inputs.outputs.items():
        assert result[name].shape == shape, name
    s = inputs.sizes
    rows = (s["L"], s["B"], s["Hkv"], s["D"]) if op == "decode_layers" else (s["T"], s["Hkv"], s["D"])
    if inputs.op.writes_cache:
        assert result["k_cache"].shape == result["v_cache"].shape == rows
    for t in result.values():
        assert t.dtype == dtype and t.device.type == "cpu"
        assert torch.isfinite(t).all()


@pytest.mark.parametrize("op", goldens.ops())
def test_goldens_never_modify_their_inputs(op):
    args = case_args(op)
    before = copy.deepcopy(args)
    for dtype in (torch.float32, torch.float64):
        result = goldens.compute(op, args, dtype)
        for name, value in before.items():
            if isinstance(value, torch.Tensor):
                assert args[name].dtype == value.dtype and torch.equal(args[name], value), name
            else:
                assert args[name] == value, name
        storages = {t.untyped_storage().data_ptr() for t in args.values() if isinstance(t, torch.Tensor)}
        assert not any(t.untyped_storage().data_ptr() in storages for t in result.values())


@pytest.mark.parametrize("op", [op for op in goldens.ops() if op != "paged_decode_attention"
                                and "slot_mapping" in OPS[op].arg_names])
def test_slot_mapping_does_not_change_the_goldens(op):
    """k/v rows and outputs are computed for every row, whatever its slot (the checker masks)."""
    args = case_args(op)
    no_writes = dict(args, slot_mapping=torch.full_like(args["slot_mapping"], -1))
    a, b = run(op, args), run(op, no_writes)
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_source_hash_is_short_hex_and_per_op():
    hashes = {op: goldens.source_hash(op) for op in goldens.ops()}
    assert all(re.fullmatch("[0-9a-f]{16}", h) for h in hashes.values()), hashes
    assert len(set(hashes.values())) == len(hashes)
    assert goldens.source_hash("rope_kv_write") == hashes["rope_kv_write"]


def test_bad_requests_say_what_is_wrong():
    args = case_args("rope_kv_write")
    with pytest.raises(KeyError, match="no golden for op 'rope_kv_writ'"):
        goldens.compute("rope_kv_writ", args)
    with pytest.raises(GoldenInputError, match="dtype"):
        goldens.compute("rope_kv_write", args, torch.bfloat16)
    with pytest.raises(GoldenInputError, match="missing inputs inv_rms"):
        goldens.compute("rope_kv_write", {k: v for k, v in args.items() if k != "inv_rms"})


def test_a_block_table_hole_inside_a_sequence_is_an_input_error():
    args = case_args("paged_decode_attention", seq_lens=SeqLens("const", (20,)))
    block_table = args["block_table"].clone()
    block_table[1, 1] = -1                     # position 16..19 of sequence 1 has no page
    with pytest.raises(GoldenInputError, match="position 16 to page -1"):
        run("paged_decode_attention", dict(args, block_table=block_table))


# -- rope_kv_write: QK-norm and RoPE ------------------------------------------------------------

def test_rope_at_position_zero_leaves_the_qk_normed_values():
    """cos = 1, sin = 0 at position 0: query / w has RMS 1 per head and points along proj * inv_rms."""
    inputs = generate(make_case("rope_kv_write", seq_lens=SeqLens("const", (1,))))   # positions all 0
    args, s = inputs.args, inputs.sizes
    result = run("rope_kv_write", args)
    for out_name, proj, weight, heads in (("query", "q_proj", "q_norm_weight", s["Hq"]),
                                          ("k_cache", "k_proj", "k_norm_weight", s["Hkv"])):
        unweighted = result[out_name] / args[weight].double()
        rms = unweighted.pow(2).mean(-1).sqrt()
        x = (args[proj].double() * args["inv_rms"].double()).reshape(s["B"], heads, s["D"])
        x_rms = x.pow(2).mean(-1).sqrt()
        torch.testing.assert_close(rms, x_rms / torch.sqrt(x_rms ** 2 + args["eps"]), rtol=1e-12, atol=0)
        torch.testing.assert_close(unweighted * x_rms[..., None], x * rms[..., None], rtol=1e-12, atol=1e-12)
    # v is neither normed nor rotated: just proj * inv_rms
    v = (args["v_proj"].double() * args["inv_rms"].double()).reshape(s["B"], s["Hkv"], s["D"])
    torch.testing.assert_close(result["v_cache"], v, rtol=1e-15, atol=0)


def hand_rope_inputs(q: list[float], k: list[float], angles: tuple[float, float]) -> dict:
    """B 1, one head of D 4 at position 1, unit norm weights, eps 0; tables in the NeoX layout."""
    a, b = angles
    rope_angles = torch.tensor([[0.0, 0.0, 0.0, 0.0], [a, b, a, b]], dtype=torch.float64)
    cache = torch.zeros(1, 4, 1, 4, dtype=torch.bfloat16)
    return {
        "q_proj": torch.tensor([q]), "k_proj": torch.tensor([k]), "v_proj": torch.tensor([[1.0, 2.0, 3.0, 4.0]]),
        "inv_rms": torch.ones(1, 1), "q_norm_weight": torch.ones(4), "k_norm_weight": torch.ones(4),
        "rope_cos": rope_angles.cos().float(), "rope_sin": rope_angles.sin().float(),
        "positions": torch.tensor([1], dtype=torch.int32), "slot_mapping": torch.tensor([1], dtype=torch.int32),
        "eps": 0.0, "k_cache": cache, "v_cache": cache.clone(),
    }


def test_rope_is_neox_rotate_half_not_gptj_pairs():
    """x = e₀ (normed: 2·e₀) rotates into the *other half* (index D/2), not into its neighbour (index 1)."""
    a, b = math.pi / 3, math.pi / 7
    args = hand_rope_inputs([1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], (a, b))
    result = run("rope_kv_write", args)
    ca, sa = float(args["rope_cos"][1, 0]), float(args["rope_sin"][1, 0])   # the fp32 table, as given
    neox_q = torch.tensor([2 * ca, 0.0, 2 * sa, 0.0], dtype=torch.float64)
    gptj_q = torch.tensor([2 * ca, 2 * sa, 0.0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(result["query"][0, 0], neox_q, rtol=0, atol=1e-12)
    assert not torch.allclose(result["query"][0, 0], gptj_q)
    # rotate_half([x₁, x₂]) = [-x₂, x₁]: e₂ goes to -sin·e₀ + cos·e₂
    torch.testing.assert_close(result["k_cache"][0, 0], torch.tensor([-2 * sa, 0.0, 2 * ca, 0.0], dtype=torch.float64),
                               rtol=0, atol=1e-12)


# -- attention ----------------------------------------------------------------------------------

def cache_row(cache: torch.Tensor, block_table: torch.Tensor, b: int, pos: int) -> torch.Tensor:
    page_size = cache.shape[1]
    return cache[int(block_table[b, pos // page_size]), pos % page_size]


def test_attention_over_one_position_returns_its_v_row():
    inputs = generate(make_case("paged_decode_attention", seq_lens=SeqLens("const", (1,)), slot_mode=SlotMode("random")))
    args, s = inputs.args, inputs.sizes
    out = run("paged_decode_attention", args)["out"]
    heads = kv_head_of(s["Hq"], s["Hkv"])
    for b in range(s["B"]):
        v = cache_row(args["v_cache"], args["block_table"], b, 0).double()
        assert torch.equal(out[b], v[heads])


def test_fused_attention_over_the_current_token_alone_returns_its_bf16_v():
    args = case_args("fused_rope_decode_attention", seq_lens=SeqLens("const", (1,)))
    result = run("fused_rope_decode_attention", args)
    heads = kv_head_of(TINY.num_heads, TINY.num_kv_heads)
    assert torch.equal(result["out"], to_bf16_and_back(result["v_cache"])[:, heads])


def test_equal_keys_average_the_values():
    """With every key equal, softmax is uniform: out = mean of the v rows of the sequence."""
    seq_len = 21
    args = case_args("paged_decode_attention", seq_lens=SeqLens("const", (seq_len,)))
    k_cache = torch.ones_like(args["k_cache"])
    out = run("paged_decode_attention", dict(args, k_cache=k_cache))["out"]
    heads = kv_head_of(TINY.num_heads, TINY.num_kv_heads)
    for b in range(TINY.batch):
        rows = torch.stack([cache_row(args["v_cache"], args["block_table"], b, p) for p in range(seq_len)])
        torch.testing.assert_close(out[b], rows.double().mean(0)[heads], rtol=1e-12, atol=1e-12)


def test_softmax_uses_the_given_scale():
    """One head, D 2, two positions: scores scale·[q·k₀, q·k₁] = 0.5·[0, 2] -> weights [1, e] / (1 + e)."""
    cache_k = torch.tensor([[[[0.0, 0.0]], [[2.0, 0.0]]]], dtype=torch.bfloat16)    # [N 1, P 2, Hkv 1, D 2]
    cache_v = torch.tensor([[[[1.0, 0.0]], [[0.0, 1.0]]]], dtype=torch.bfloat16)
    args = {
        "query": torch.tensor([[[1.0, 0.0]]], dtype=torch.bfloat16), "block_table": torch.tensor([[0]], dtype=torch.int32),
        "seq_lens": torch.tensor([2], dtype=torch.int32), "scale": 0.5, "k_cache": cache_k, "v_cache": cache_v,
    }
    out = run("paged_decode_attention", args)["out"]
    e = math.e
    torch.testing.assert_close(out[0, 0], torch.tensor([1 / (1 + e), e / (1 + e)], dtype=torch.float64),
                               rtol=1e-15, atol=1e-15)


def test_query_head_h_reads_kv_head_h_over_group():
    """Tiny: Hq 4, Hkv 2.  Changing KV head 1 changes query heads 2, 3 only (h % Hkv would hit head 1)."""
    args = case_args("paged_decode_attention", seq_lens=SeqLens("const", (20,)))
    before = run("paged_decode_attention", args)["out"]
    k_cache, v_cache = args["k_cache"].clone(), args["v_cache"].clone()
    k_cache[:, :, 1] = -k_cache[:, :, 1]
    v_cache[:, :, 1] = v_cache[:, :, 1] + 1
    after = run("paged_decode_attention", dict(args, k_cache=k_cache, v_cache=v_cache))["out"]
    assert torch.equal(before[:, :2], after[:, :2])
    assert (before[:, 2:] != after[:, 2:]).any(dim=-1).all()


def test_output_head_h_comes_from_query_head_h():
    """Changing query head 1 changes output head 1 only (not a head permuted by the GQA grouping)."""
    args = case_args("paged_decode_attention", seq_lens=SeqLens("const", (20,)))
    before = run("paged_decode_attention", args)["out"]
    query = args["query"].clone()
    query[:, 1] = -query[:, 1]
    after = run("paged_decode_attention", dict(args, query=query))["out"]
    others = [0, 2, 3]
    assert torch.equal(before[:, others], after[:, others])
    assert (before[:, 1] != after[:, 1]).any(dim=-1).all()


@pytest.mark.parametrize("op", ATTENTION_OPS)
def test_paged_gather_follows_the_block_table(op):
    """Moving pages around and the block table with them changes nothing."""
    args = case_args(op, seq_lens=SeqLens("multi_block", ()), slot_mode=SlotMode("random"))
    before = run(op, args)
    num_pages = args["k_cache"].shape[-4]
    perm = torch.randperm(num_pages, generator=torch.Generator().manual_seed(5))
    moved = {}
    for name in ("k_cache", "v_cache"):
        cache = torch.empty_like(args[name])
        cache[..., perm, :, :, :] = args[name]          # page i now lives at perm[i]
        moved[name] = cache
    table = args["block_table"].long()
    moved["block_table"] = torch.where(table >= 0, perm[table.clamp(min=0)], -1).to(torch.int32)
    after = run(op, dict(args, **moved))
    for name in before:
        assert torch.equal(before[name], after[name]), name


def test_a_page_no_sequence_reads_does_not_matter_but_a_read_page_does():
    args = case_args("paged_decode_attention", seq_lens=SeqLens("list", (5, 17, 3, 40)))
    before = run("paged_decode_attention", args)["out"]
    used = {int(args["block_table"][b, j]) for b, n in enumerate((5, 17, 3, 40)) for j in range(math.ceil(n / 16))}
    unused = sorted(set(range(args["k_cache"].shape[0])) - used)
    k_cache = args["k_cache"].clone()
    k_cache[unused] = 7.0
    assert torch.equal(before, run("paged_decode_attention", dict(args, k_cache=k_cache))["out"])
    k_cache[int(args["block_table"][3, 2])] = 7.0          # positions 32..39 of sequence 3
    after = run("paged_decode_attention", dict(args, k_cache=k_cache))["out"]
    assert torch.equal(before[:3], after[:3]) and not torch.equal(before[3], after[3])


def test_warmup_aliasing_pages_read_what_the_row_holds():
    """block_value 0: every position of every sequence is on page 0, offset p % P."""
    args = case_args("paged_decode_attention", seq_lens=SeqLens("const", (20,)),
                     slot_mode=SlotMode("const", -1), block_value=0)
    out = run("paged_decode_attention", args)["out"]
    assert torch.isfinite(out).all()
    k_cache = args["k_cache"].clone()
    k_cache[1:] = 9.0                                        # pages nobody reads
    assert torch.equal(out, run("paged_decode_attention", dict(args, k_cache=k_cache))["out"])


# -- composition -------------------------------------------------------------------------------

def test_fused_equals_rope_kv_write_then_paged_attention_through_the_cache():
    case = make_case("fused_rope_decode_attention", seq_lens=SeqLens("multi_block", ()))
    inputs = generate(case)
    args, P = inputs.args, case.geometry.page_size
    fused = run("fused_rope_decode_attention", args)

    rope_names = [a.name for a in generate(make_case("rope_kv_write")).op.args if a.role != "output"]
    rope = run("rope_kv_write", {name: args[name] for name in rope_names})
    for name in ("query", "k_cache", "v_cache"):
        assert torch.equal(fused[name], rope[name]), name

    # what a kernel would store: bf16 query, bf16 k/v rows at their slots
    k_cache, v_cache = args["k_cache"].clone(), args["v_cache"].clone()
    for row, slot in enumerate(args["slot_mapping"].tolist()):
        assert slot >= 0
        k_cache[slot // P, slot % P] = rope["k_cache"][row].bfloat16()
        v_cache[slot // P, slot % P] = rope["v_cache"][row].bfloat16()
    paged = run("paged_decode_attention", {
        "query": rope["query"].bfloat16(), "block_table": args["block_table"], "seq_lens": args["seq_lens"],
        "scale": args["scale"], "k_cache": k_cache, "v_cache": v_cache,
    })
    torch.testing.assert_close(fused["out"], paged["out"], rtol=1e-12, atol=1e-12)


def test_prefill_of_one_token_per_sequence_equals_fused_decode():
    inputs = generate(make_case("prefill_attention", seq_lens=SeqLens("multi_block", ()), chunk_size=1))
    args = inputs.args
    prefill = run("prefill_attention", args)
    fused_args = {name: args[name] for name in (
        "q_proj", "k_proj", "v_proj", "inv_rms", "q_norm_weight", "k_norm_weight", "rope_cos", "rope_sin",
        "positions", "slot_mapping", "block_table", "scale", "eps", "k_cache", "v_cache")}
    fused_args["seq_lens"] = args["context_lens"] + 1
    fused = run("fused_rope_decode_attention", fused_args)
    torch.testing.assert_close(prefill["out"], fused["out"], rtol=1e-12, atol=1e-12)
    assert torch.equal(prefill["k_cache"], fused["k_cache"]) and torch.equal(prefill["v_cache"], fused["v_cache"])


def perturb_token(args: dict, token: int) -> dict:
    changed = {name: args[name].clone() for name in ("q_proj", "k_proj", "v_proj")}
    for t in changed.values():
        t[token] = -2.0 * t[token] + 1.0
    return dict(args, **changed)


@pytest.mark.parametrize("chunk_size", [None, 8])
def test_prefill_is_causal_within_the_chunk(chunk_size):
    args = case_args("prefill_attention", seq_lens=SeqLens("list", (12, 30, 1, 17)), chunk_size=chunk_size)
    cu = args["cu_seqlens"].tolist()
    before = run("prefill_attention", args)["out"]
    last = cu[2] - 1                                          # last token of sequence 1
    after = run("prefill_attention", perturb_token(args, last))["out"]
    torch.testing.assert_close(after[:last], before[:last], rtol=0, atol=1e-14)   # earlier tokens do not see it
    torch.testing.assert_close(after[last + 1:], before[last + 1:], rtol=0, atol=0)  # other sequences
    assert not torch.allclose(after[last], before[last])
    first = cu[1]                                             # first token of sequence 1: later tokens see it
    after = run("prefill_attention", perturb_token(args, first))["out"]
    assert all(not torch.allclose(after[t], before[t]) for t in range(first, cu[2]))


def test_prefill_query_blocks_do_not_change_the_result(monkeypatch):
    import harness.goldens.prefill_attention as prefill

    args = case_args("prefill_attention", seq_lens=SeqLens("const", (40,)), chunk_size=None)
    before = run("prefill_attention", args)["out"]
    monkeypatch.setattr(prefill, "QUERY_BLOCK", 3)
    torch.testing.assert_close(run("prefill_attention", args)["out"], before, rtol=1e-12, atol=1e-12)


# -- decode_layers -----------------------------------------------------------------------------

def test_decode_layers_applies_the_layer_num_layers_times_with_cache_l():
    args = case_args("decode_layers", seq_lens=SeqLens("const", (10,)), num_layers=2)
    two = run("decode_layers", args)
    one = run("decode_layers", dict(args, num_layers=1))
    assert two["k_cache"].shape[0] == 2 and one["k_cache"].shape[0] == 1
    assert torch.equal(two["k_cache"][0], one["k_cache"][0])        # layer 0 is the same layer
    assert not torch.allclose(two["k_cache"][1], one["k_cache"][0])  # layer 1 sees a moved residual
    assert not torch.allclose(two["logits"], one["logits"])

    k_cache = args["k_cache"].clone()
    k_cache[1] = -k_cache[1]                                     # only layer 1's context changes
    two_after = run("decode_layers", dict(args, k_cache=k_cache))
    one_after = run("decode_layers", dict(args, k_cache=k_cache, num_layers=1))
    for name in one:
        assert torch.equal(one[name], one_after[name]), name
    assert torch.equal(two["k_cache"], two_after["k_cache"])     # rows are computed before attention
    assert (two["next_hidden"] != two_after["next_hidden"]).any(dim=-1).all()
    assert not torch.allclose(two["logits"], two_after["logits"])


def test_decode_layers_without_wo_or_mlp_is_just_the_lm_head_of_the_hidden():
    """Zero wo and w_down: the residual stays hidden, logits = rmsnorm(hidden) * w @ lm_head.T."""
    args = case_args("decode_layers")
    args = dict(args, wo=torch.zeros_like(args["wo"]), w_down=torch.zeros_like(args["w_down"]))
    result = run("decode_layers", args)
    hidden = args["hidden"].double()
    assert torch.equal(result["next_hidden"], hidden)
    normed = hidden / hidden.pow(2).mean(-1, keepdim=True).add(args["eps"]).sqrt()
    expected = (normed * args["final_norm_weight"].double()) @ args["lm_head"].double().T
    torch.testing.assert_close(result["logits"], expected, rtol=1e-12, atol=1e-12)


def test_decode_layers_with_wo_zero_is_the_mlp_block_alone():
    """wo = 0 switches attention off: next_hidden = r + (silu(h @ w_gate) * (h @ w_up)) @ w_down, h = rmsnorm(r) * w."""
    args = case_args("decode_layers")
    args = dict(args, wo=torch.zeros_like(args["wo"]))
    result = run("decode_layers", args)
    r = args["hidden"].double()
    h = r / r.pow(2).mean(-1, keepdim=True).add(args["eps"]).sqrt() * args["post_rms_weight"].double()
    gate, up, down = (args[name].double() for name in ("w_gate", "w_up", "w_down"))
    expected = r + (torch.nn.functional.silu(h @ gate) * (h @ up)) @ down
    torch.testing.assert_close(result["next_hidden"], expected, rtol=1e-12, atol=1e-12)


def test_decode_layers_lm_head_blocks_do_not_change_the_logits(monkeypatch):
    import harness.goldens.decode_layers as layers

    args = case_args("decode_layers")
    before = run("decode_layers", args)["logits"]
    monkeypatch.setattr(layers, "LM_HEAD_ROWS", 100)
    torch.testing.assert_close(run("decode_layers", args)["logits"], before, rtol=1e-12, atol=1e-12)


def test_decode_layers_rejects_more_layers_than_the_cache_holds():
    args = case_args("decode_layers")
    with pytest.raises(GoldenInputError, match="num_layers = 2"):
        run("decode_layers", dict(args, num_layers=2))


# -- precision and speed -----------------------------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("op", goldens.ops())
def test_fp32_agrees_with_fp64(op, seed):
    """To 1e-5 where nothing is rounded to bf16 on the way (``@exact``).  Where q/k/v are
    rounded before attention, fp32 and fp64 can round one element to neighbouring bf16
    values (seed 2 of ``decode_layers`` does): a row may then differ by up to twice what
    the rounding itself moves it, and no more."""
    args = case_args(op, seed=seed)
    single = goldens.compute(op, args, torch.float32, exact=True)
    double = goldens.compute(op, args, torch.float64, exact=True)
    for name in double:
        exact = double.get(name + goldens.EXACT_SUFFIX)
        if exact is None:
            torch.testing.assert_close(single[name].double(), double[name], rtol=1e-5, atol=1e-5, msg=name)
            continue
        moved = (double[name] - exact).abs().flatten(1).amax(dim=1).view(-1, *[1] * (exact.dim() - 1))
        bound = 1e-5 + 1e-5 * double[name].abs() + 2 * moved
        assert bool(((single[name].double() - double[name]).abs() <= bound).all()), name


@pytest.mark.parametrize("op", list(OPS))
def test_a_golden_makes_its_tensors_beside_the_inputs_whatever_the_default_device(op):
    """CPU inputs with the process's default device elsewhere (``meta`` here: a kernel library's
    ``set_default_device``): the golden's own tensors still go beside the inputs, and the result is
    the one computed with the CPU as the default."""
    args = case_args(op)
    expected = run(op, args)
    torch.set_default_device("meta")
    try:
        got = run(op, args)
    finally:
        torch.set_default_device(None)
    assert set(got) == set(expected)
    for name in expected:
        assert got[name].device.type == "cpu" and torch.equal(got[name], expected[name]), name
