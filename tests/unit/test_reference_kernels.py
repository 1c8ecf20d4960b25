"""The reference kernels and the mutants, on the CPU with tiny shapes.

The reference is checked against naive math written here (loops over rows,
heads and positions, fp64 between the contract's bf16 rounding points), never
against goldens/.  Launches go through a small stand-in for the harness's
launcher: outputs NaN-poisoned, caches and outputs as views into buffers with
guard bands on both sides.
"""
from __future__ import annotations

import importlib
import inspect
import math
from dataclasses import dataclass, replace
from typing import Any, Callable

import pytest
import torch

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.worker.inputs import CaseInputs, generate
from harness.ops import OPS
from harness.ops.registry import BUILTINS
import harness.kernels.reference as ref
from harness.kernels.mutants import racy_head, returns_query, skip_rope, stale_kv, unguarded_slot_write

TINY = PRESETS["tiny"]
GUARD = 4096                      # elements each side; more than one cache row (Hkv*D)
CACHE_WRITERS = ("rope_kv_write", "fused_rope_decode_attention", "prefill_attention", "decode_layers")

# One bf16 ulp is 2^-7 relative at most; the naive math rounds at the same points
# in fp64, so a value may land one ulp away where fp32 and fp64 round differently.
BF16 = dict(atol=1e-5, rtol=8e-3)
# bf16 output of fp32 attention vs fp64 from bf16 q/k/v: one ulp, plus an absolute term for
# outputs near zero: where the kernel's fp32 q or k rounds to the other bf16 neighbour than
# the naive fp64 one, a logit moves by ulp(q)*|k|*scale and the output by that times p*|v - out|
# (seen up to 3e-5 beyond one ulp at seeds 0-5 of the prefill cases below)
ATTN = dict(atol=1e-4, rtol=8e-3)


# -- cases and launches ---------------------------------------------------------

def make_case(op: str, *, slot_mode: SlotMode = SlotMode("padded", 0.25),
              seq_lens: SeqLens = SeqLens("multi_block"), seed: int = 3, **fields: Any) -> Case:
    if op == "prefill_attention":
        fields.setdefault("chunk_size", 5)
    return Case(f"{op}-test", "unit", "tests/unit", op, "reference", geometry=fields.pop("geometry", TINY),
                seq_lens=seq_lens, slot_mode=slot_mode, seed=seed, **fields)


@dataclass
class Guarded:
    """A tensor handed to the kernel as a view into a larger buffer with guard bands."""

    buffer: torch.Tensor
    before: torch.Tensor          # the whole buffer at launch
    view: torch.Tensor

    @classmethod
    def around(cls, value: torch.Tensor) -> "Guarded":
        buffer = torch.full((value.numel() + 2 * GUARD,), -999.0, dtype=value.dtype)
        view = buffer[GUARD:GUARD + value.numel()].view(value.shape)
        view.copy_(value)
        return cls(buffer, buffer.clone(), view)

    def guard_changed(self) -> tuple[bool, bool]:
        """(before the buffer, after the buffer): was any guard element touched?"""
        now, was = bits(self.buffer), bits(self.before)
        return (not torch.equal(now[:GUARD], was[:GUARD]), not torch.equal(now[-GUARD:], was[-GUARD:]))


@dataclass
class Launch:
    inputs: CaseInputs
    args: dict[str, Any]
    buffers: dict[str, Guarded]
    result: Any

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.args[name]


def launch(kernel: Callable[..., Any], inputs: CaseInputs, **overrides: Any) -> Launch:
    args = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.args.items()}
    args.update(overrides)
    buffers = {a.name: Guarded.around(args[a.name]) for a in inputs.op.caches}
    for name, (shape, dtype) in inputs.outputs.items():
        buffers[name] = Guarded.around(torch.full(shape, float("nan"), dtype=dtype))
    args.update({name: g.view for name, g in buffers.items()})
    result = kernel(**args)
    return Launch(inputs, args, buffers, result)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(bits(a), bits(b))


def close(actual: torch.Tensor, expected: torch.Tensor, tol: dict[str, float]) -> None:
    torch.testing.assert_close(actual.double(), expected.double(), **tol)


def kernel_of(name: str, op: str) -> Callable[..., Any]:
    module, _, attr = BUILTINS[name][op].partition(":")
    return getattr(importlib.import_module(module), attr)


# -- naive math (fp64 between bf16 rounding points) ----------------------------------

def bf(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16)


def naive_norm_rope(x, weight, cos_row, sin_row, eps, rope=True):
    y = x / math.sqrt(float((x * x).mean()) + eps) * weight
    if not rope:
        return y
    half = y.shape[0] // 2
    rotated = torch.cat([-y[half:], y[:half]])
    return y * cos_row + rotated * sin_row


def naive_project(a: dict[str, Any], q_proj, k_proj, v_proj, row_scale, rope=True):
    """bf16 q [R,Hq,D], k, v [R,Hkv,D], one row and head at a time."""
    D = a["q_norm_weight"].shape[0]
    R = q_proj.shape[0]
    cos, sin = a["rope_cos"].double(), a["rope_sin"].double()
    qw, kw = a["q_norm_weight"].double(), a["k_norm_weight"].double()
    q = torch.zeros(R, q_proj.shape[1] // D, D, dtype=torch.float64)
    k = torch.zeros(R, k_proj.shape[1] // D, D, dtype=torch.float64)
    v = torch.zeros_like(k)
    for r in range(R):
        pos = int(a["positions"][r])
        s = float(row_scale[r])
        for h in range(q.shape[1]):
            q[r, h] = naive_norm_rope(q_proj[r, h * D:(h + 1) * D].double() * s, qw, cos[pos], sin[pos], a["eps"], rope)
        for h in range(k.shape[1]):
            k[r, h] = naive_norm_rope(k_proj[r, h * D:(h + 1) * D].double() * s, kw, cos[pos], sin[pos], a["eps"], rope)
            v[r, h] = v_proj[r, h * D:(h + 1) * D].double() * s
    return bf(q), bf(k), bf(v)


def naive_attend(q, keys, values, scale):
    """q [Hq,D], keys/values [S,Hkv,D] (bf16) → fp64 [Hq,D], one head at a time."""
    Hq, Hkv = q.shape[0], keys.shape[1]
    out = torch.zeros(q.shape, dtype=torch.float64)
    for h in range(Hq):
        kv = h // (Hq // Hkv)
        scores = scale * (keys[:, kv].double() @ q[h].double())
        weights = torch.softmax(scores, dim=0)
        out[h] = weights @ values[:, kv].double()
    return out


def naive_rows(cache, block_table, b, positions):
    """Cache rows [len(positions), Hkv, D] of sequence ``b``, one position at a time."""
    P = cache.shape[1]
    return torch.stack([cache[int(block_table[b, p // P]), p % P] for p in positions])


def naive_decode(a, k_cache, v_cache, query, fresh_k=None, fresh_v=None):
    B = query.shape[0]
    out = torch.zeros(query.shape, dtype=torch.float64)
    for b in range(B):
        n = int(a["seq_lens"][b]) - (0 if fresh_k is None else 1)
        keys = naive_rows(k_cache, a["block_table"], b, range(n)) if n else k_cache.new_zeros(0, *k_cache.shape[2:])
        values = naive_rows(v_cache, a["block_table"], b, range(n)) if n else keys
        if fresh_k is not None:
            keys, values = torch.cat([keys, fresh_k[b:b + 1]]), torch.cat([values, fresh_v[b:b + 1]])
        out[b] = naive_attend(query[b], keys, values, a["scale"])
    return out


def naive_prefill(a, q, k, v):
    out = torch.zeros(q.shape, dtype=torch.float64)
    cu, ctx = a["cu_seqlens"].tolist(), a["context_lens"].tolist()
    for b in range(len(ctx)):
        cached_k = naive_rows(a["k_cache"], a["block_table"], b, range(ctx[b])) if ctx[b] else k[:0]
        cached_v = naive_rows(a["v_cache"], a["block_table"], b, range(ctx[b])) if ctx[b] else v[:0]
        for t in range(cu[b], cu[b + 1]):
            keys = torch.cat([cached_k, k[cu[b]:t + 1]])
            values = torch.cat([cached_v, v[cu[b]:t + 1]])
            out[t] = naive_attend(q[t], keys, values, a["scale"])
    return out


def naive_rms(x, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def naive_decode_layers(a):
    w = {n: a[n].double() for n in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "lm_head")}
    B = a["hidden"].shape[0]
    r = a["hidden"].double()
    eps = a["eps"]
    caches = []                                   # per layer: (k, v) rows computed for the launch
    for layer in range(a["num_layers"]):
        hb = bf(naive_rms(r, eps) * a["input_rms_weight"].double()).double()
        q, k, v = naive_project(a, hb @ w["wq"], hb @ w["wk"], hb @ w["wv"], torch.ones(B))
        attn = naive_decode(a, a["k_cache"][layer], a["v_cache"][layer], q, k, v)
        caches.append((k, v))
        r = r + bf(attn).double().reshape(B, -1) @ w["wo"]
        hb = bf(naive_rms(r, eps) * a["post_rms_weight"].double()).double()
        r = r + bf(torch.nn.functional.silu(hb @ w["w_gate"]) * (hb @ w["w_up"])).double() @ w["w_down"]
    final = bf(naive_rms(r, eps) * a["final_norm_weight"].double()).double()
    return final @ w["lm_head"].T, r, caches


def expected_cache(before, slots, rows):
    """The cache after writing ``rows`` at ``slots >= 0``; plus the mask of written rows [N, P]."""
    after, written = before.clone(), torch.zeros(before.shape[:2], dtype=torch.bool)
    P = before.shape[1]
    for r, s in enumerate(slots.tolist()):
        if s >= 0:
            after[s // P, s % P] = rows[r]
            written[s // P, s % P] = True
    return after, written


def check_cache(actual, before, slots, rows):
    """Written rows close to the naive ones; every other row bit-identical to the canary."""
    expected, written = expected_cache(before, slots, rows)
    assert same_bits(actual[~written], before[~written])
    close(actual[written], expected[written], BF16)


# -- the reference against naive math ---------------------------------------------

SLOT_MODES = [SlotMode("padded", 0.25), SlotMode("arange"), SlotMode("random"), SlotMode("const", -1)]


@pytest.mark.parametrize("slot_mode", SLOT_MODES, ids=str)
def test_rope_kv_write_matches_naive(slot_mode):
    inputs = generate(make_case("rope_kv_write", slot_mode=slot_mode))
    a = inputs.args
    run = launch(ref.rope_kv_write, inputs)
    q, k, v = naive_project(a, a["q_proj"], a["k_proj"], a["v_proj"], a["inv_rms"][:, 0])
    close(run["query"], q, BF16)
    check_cache(run["k_cache"], a["k_cache"], a["slot_mapping"], k)
    check_cache(run["v_cache"], a["v_cache"], a["slot_mapping"], v)


@pytest.mark.parametrize("seq_lens", [SeqLens("multi_block"), SeqLens("list", (1, 2, 16, 64))], ids=str)
def test_paged_decode_attention_matches_naive(seq_lens):
    inputs = generate(make_case("paged_decode_attention", seq_lens=seq_lens))
    a = inputs.args
    run = launch(ref.paged_decode_attention, inputs)
    close(run["out"], naive_decode(a, a["k_cache"], a["v_cache"], a["query"]), ATTN)


@pytest.mark.parametrize("slot_mode", SLOT_MODES, ids=str)
def test_fused_rope_decode_attention_matches_naive(slot_mode):
    inputs = generate(make_case("fused_rope_decode_attention", slot_mode=slot_mode))
    a = inputs.args
    run = launch(ref.fused_rope_decode_attention, inputs)
    q, k, v = naive_project(a, a["q_proj"], a["k_proj"], a["v_proj"], a["inv_rms"][:, 0])
    close(run["query"], q, BF16)
    # Every row's out, even slot < 0 ones: the current token comes from the fresh k/v.
    close(run["out"], naive_decode(a, a["k_cache"], a["v_cache"], q, k, v), ATTN)
    check_cache(run["k_cache"], a["k_cache"], a["slot_mapping"], k)
    check_cache(run["v_cache"], a["v_cache"], a["slot_mapping"], v)


@pytest.mark.parametrize("chunk_size", [5, 20, None])
@pytest.mark.parametrize("slot_mode", [SlotMode("padded", 0.25), SlotMode("random")], ids=str)
def test_prefill_attention_matches_naive(chunk_size, slot_mode):
    inputs = generate(make_case("prefill_attention", chunk_size=chunk_size, slot_mode=slot_mode))
    a = inputs.args
    run = launch(ref.prefill_attention, inputs)
    q, k, v = naive_project(a, a["q_proj"], a["k_proj"], a["v_proj"], a["inv_rms"][:, 0])
    close(run["out"], naive_prefill(a, q, k, v), ATTN)
    check_cache(run["k_cache"], a["k_cache"], a["slot_mapping"], k)
    check_cache(run["v_cache"], a["v_cache"], a["slot_mapping"], v)


def test_decode_layers_matches_naive():
    inputs = generate(make_case("decode_layers", geometry=replace(TINY, num_layers=2)))
    a = inputs.args
    run = launch(ref.decode_layers, inputs)
    logits, r, caches = naive_decode_layers(a)
    # Two layers of bf16 activations: a bf16 rounding flip in one layer (the naive and the
    # reference sum in different orders) moves the next by up to about one bf16 step of
    # the values it feeds (RMS ~1 for logits, ~3 for the residual).
    close(run["logits"], logits, dict(atol=2e-2, rtol=1e-2))
    close(run["next_hidden"], r, dict(atol=2e-2, rtol=1e-2))
    for layer, (k, v) in enumerate(caches):
        check_cache(run["k_cache"][layer], a["k_cache"][layer], a["slot_mapping"], k)
        check_cache(run["v_cache"][layer], a["v_cache"][layer], a["slot_mapping"], v)


# -- the launch contract ------------------------------------------------------------

@pytest.mark.parametrize("op", ref.OP_NAMES)
@pytest.mark.parametrize("slot_mode", [SlotMode("padded", 0.5), SlotMode("const", -1)], ids=str)
def test_launch_contract(op, slot_mode):
    """Outputs fully written, guards intact, inputs untouched, result None or the out-style output."""
    inputs = generate(make_case(op, slot_mode=slot_mode))
    run = launch(getattr(ref, op), inputs)
    for name in inputs.outputs:
        assert not run[name].isnan().any(), name
        assert run[name].isfinite().all(), name
    for name, g in run.buffers.items():
        assert g.guard_changed() == (False, False), name
    for name, value in inputs.args.items():
        if isinstance(value, torch.Tensor) and name not in run.buffers:
            assert same_bits(run[name], value), name
    main = {"fused_rope_decode_attention": "out", "decode_layers": "logits"}.get(op, next(iter(inputs.outputs)))
    assert run.result is None or run.result is run[main]


@pytest.mark.parametrize("op", CACHE_WRITERS)
def test_slot_minus_one_leaves_cache_bit_identical(op):
    inputs = generate(make_case(op, slot_mode=SlotMode("const", -1)))
    run = launch(getattr(ref, op), inputs)
    for name in ("k_cache", "v_cache"):
        g = run.buffers[name]
        assert same_bits(g.buffer, g.before), name


@pytest.mark.parametrize("op", ref.OP_NAMES)
def test_reference_is_bitwise_reproducible(op):
    inputs = generate(make_case(op))
    first, second = launch(getattr(ref, op), inputs), launch(getattr(ref, op), inputs)
    for name in list(inputs.outputs) + [a.name for a in inputs.op.caches]:
        assert same_bits(first[name], second[name]), name


def test_warmup_block_table_on_one_scratch_page():
    """Serving warmup: every block on page 0 of a one-page cache, nothing written."""
    inputs = generate(make_case("fused_rope_decode_attention", slot_mode=SlotMode("const", -1),
                                seq_lens=SeqLens("const", (40,)), block_value=0, scratch_pages=1))
    a = inputs.args
    run = launch(ref.fused_rope_decode_attention, inputs)
    q, k, v = naive_project(a, a["q_proj"], a["k_proj"], a["v_proj"], a["inv_rms"][:, 0])
    close(run["out"], naive_decode(a, a["k_cache"], a["v_cache"], q, k, v), ATTN)
    assert same_bits(run.buffers["k_cache"].buffer, run.buffers["k_cache"].before)


# -- block table entries past the sequence are never dereferenced ---------------------

def _poison_unused_blocks(inputs: CaseInputs, reach: list[int], value: int) -> torch.Tensor:
    """The block table with every block no position below ``reach[b]`` lives in set to ``value``."""
    table = inputs.args["block_table"].clone()
    P = inputs.sizes["P"]
    for b, n in enumerate(reach):
        table[b, math.ceil(n / P):] = value
    return table


@pytest.mark.parametrize("op", ["paged_decode_attention", "fused_rope_decode_attention", "prefill_attention"])
def test_unused_block_table_entries_never_dereferenced(op):
    # Lengths whose current token opens a new block (17 = P+1): that block holds no cached row.
    inputs = generate(make_case(op, seq_lens=SeqLens("list", (1, 17, 33, 40)), slot_mode=SlotMode("arange")))
    a = inputs.args
    if op == "paged_decode_attention":
        reach = a["seq_lens"].tolist()
    elif op == "fused_rope_decode_attention":
        reach = [s - 1 for s in a["seq_lens"].tolist()]
    else:
        reach = a["context_lens"].tolist()
    kernel = getattr(ref, op)
    outs = []
    for value in (-1, 10**6):   # -1 would silently wrap; 10**6 raises if ever used as an index
        run = launch(kernel, inputs, block_table=_poison_unused_blocks(inputs, reach, value))
        outs.append(run["out"])
    assert same_bits(outs[0], outs[1])
    assert same_bits(outs[0], launch(kernel, inputs)["out"])


# -- split-K -------------------------------------------------------------------------

def _single_pass_decode(a, query):
    """fp32 softmax over all positions at once (no splits)."""
    out = torch.zeros(query.shape, dtype=torch.float32)
    G = query.shape[1] // a["k_cache"].shape[2]
    for b in range(query.shape[0]):
        n = int(a["seq_lens"][b])
        keys = naive_rows(a["k_cache"], a["block_table"], b, range(n)).float()
        values = naive_rows(a["v_cache"], a["block_table"], b, range(n)).float()
        for h in range(query.shape[1]):
            w = torch.softmax(a["scale"] * (keys[:, h // G] @ query[b, h].float()), dim=0)
            out[b, h] = w @ values[:, h // G]
    return out


@pytest.mark.parametrize("split_pages", [1, 2, 3, 4, 100])
def test_split_k_combine_equals_single_pass(split_pages):
    inputs = generate(make_case("paged_decode_attention"))
    a = inputs.args
    got = ref.decode_attention(a["query"], a["k_cache"], a["v_cache"], a["block_table"], a["seq_lens"],
                               a["scale"], split_pages=split_pages)
    torch.testing.assert_close(got, _single_pass_decode(a, a["query"]), atol=2e-6, rtol=2e-5)


@pytest.mark.parametrize("split_pages,q_tile", [(1, 1), (2, 3), (3, 7), (100, 1000)])
def test_prefill_tiling_does_not_change_the_result(split_pages, q_tile):
    inputs = generate(make_case("prefill_attention", chunk_size=20))
    a = inputs.args
    q, k, v = naive_project(a, a["q_proj"], a["k_proj"], a["v_proj"], a["inv_rms"][:, 0])
    args = (q, a["k_cache"], a["v_cache"], a["block_table"], a["cu_seqlens"], a["context_lens"], a["scale"])
    base = ref.prefill_core(*args, fresh_k=k, fresh_v=v)
    got = ref.prefill_core(*args, fresh_k=k, fresh_v=v, split_pages=split_pages, q_tile=q_tile)
    torch.testing.assert_close(got, base, atol=2e-6, rtol=2e-5)
    torch.testing.assert_close(got.double(), naive_prefill(a, q, k, v), atol=2e-6, rtol=2e-5)


def test_merge_partials_handles_empty_splits():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 1, 8, generator=g)
    k, v = torch.randn(2, 10, 2, 8, generator=g), torch.randn(2, 10, 2, 8, generator=g)
    everyone = torch.ones(2, 1, 10, dtype=torch.bool)
    whole = ref.finalize(ref.attention_partial(q, k, v, everyone, 0.5))
    nobody = torch.zeros(2, 1, 3, dtype=torch.bool)
    merged = None
    for lo, hi in ((0, 3), (3, 4), (4, 10)):
        merged = ref.merge_partials(merged, ref.attention_partial(q, k[:, lo:hi], v[:, lo:hi], everyone[..., lo:hi], 0.5))
        merged = ref.merge_partials(merged, ref.attention_partial(q, k[:, :3], v[:, :3], nobody, 0.5))
    torch.testing.assert_close(ref.finalize(merged), whole, atol=1e-6, rtol=1e-5)
    empty = ref.finalize(ref.attention_partial(q, k[:, :3], v[:, :3], nobody, 0.5))
    assert torch.equal(empty, torch.zeros_like(empty))


# -- registry and signatures --------------------------------------------------------

MINE = ("reference", "unguarded_slot_write", "returns_query", "skip_rope", "stale_kv", "racy_head", "hang", "segfault")


@pytest.mark.parametrize("name", MINE)
def test_builtin_kernels_carry_the_contract_signature(name):
    for op, target in BUILTINS[name].items():
        kernel = kernel_of(name, op)
        params = inspect.signature(kernel).parameters
        # the contract's arguments, then (kernels that dump: docs/intermediates.md) an optional dump=None
        assert tuple(params) in (OPS[op].arg_names, OPS[op].arg_names + ("dump",)), target
        assert "dump" not in params or params["dump"].default is None, target
        inspect.signature(kernel).bind(**{n: None for n in OPS[op].arg_names})


# -- mutants ---------------------------------------------------------------------------

@pytest.mark.parametrize("op", CACHE_WRITERS)
def test_unguarded_slot_write_hits_the_guard_band_before_the_cache(op):
    inputs = generate(make_case(op, slot_mode=SlotMode("padded", 0.25)))
    run = launch(getattr(unguarded_slot_write, op), inputs)
    row = inputs.sizes["Hkv"] * inputs.sizes["D"]
    for name in ("k_cache", "v_cache"):
        g = run.buffers[name]
        assert g.guard_changed() == (True, False), name
        # exactly the one row before the buffer: slot -1 of layer 0
        assert not torch.equal(bits(g.buffer[GUARD - row:GUARD]), bits(g.before[GUARD - row:GUARD]))
        assert torch.equal(bits(g.buffer[:GUARD - row]), bits(g.before[:GUARD - row]))


@pytest.mark.parametrize("op", CACHE_WRITERS)
def test_unguarded_slot_write_is_otherwise_the_reference(op):
    inputs = generate(make_case(op, slot_mode=SlotMode("random")))
    mutant, reference = launch(getattr(unguarded_slot_write, op), inputs), launch(getattr(ref, op), inputs)
    for name, g in mutant.buffers.items():
        assert same_bits(g.buffer, reference.buffers[name].buffer), name


def test_returns_query_returns_the_query_and_leaves_out_unwritten():
    inputs = generate(make_case("fused_rope_decode_attention"))
    mutant = launch(returns_query.fused_rope_decode_attention, inputs)
    reference = launch(ref.fused_rope_decode_attention, inputs)
    assert mutant.result is mutant["query"]
    assert mutant["out"].isnan().all()
    for name in ("query", "k_cache", "v_cache"):
        assert same_bits(mutant[name], reference[name]), name


@pytest.mark.parametrize("op", CACHE_WRITERS)
def test_skip_rope_differs_at_positions_past_zero(op):
    seq_lens = SeqLens("list", (1, 5, 17, 33))     # row 0 decodes position 0, where RoPE is the identity
    inputs = generate(make_case(op, seq_lens=seq_lens, slot_mode=SlotMode("arange"), chunk_size=None))
    mutant, reference = launch(getattr(skip_rope, op), inputs), launch(getattr(ref, op), inputs)
    main = {"rope_kv_write": "query", "decode_layers": "logits"}.get(op, "out")
    moved = inputs.args["positions"].long() > 0
    diff = (mutant[main].float() - reference[main].float()).flatten(1).abs().amax(1)
    assert (diff[moved] > 0).all()
    if op == "rope_kv_write":
        assert (diff[~moved] == 0).all()


@pytest.mark.parametrize("op", ["fused_rope_decode_attention", "prefill_attention", "decode_layers"])
def test_stale_kv_differs_but_writes_the_cache(op):
    inputs = generate(make_case(op, slot_mode=SlotMode("padded", 0.25)))
    mutant, reference = launch(getattr(stale_kv, op), inputs), launch(getattr(ref, op), inputs)
    main = "logits" if op == "decode_layers" else "out"
    compared = inputs.slots >= 0 if op != "prefill_attention" else torch.ones(len(inputs.slots), dtype=torch.bool)
    diff = (mutant[main].float() - reference[main].float()).flatten(1).abs().amax(1)
    assert (diff[compared] > 1e-2).all()
    for name in ("k_cache", "v_cache"):
        assert same_bits(mutant[name], reference[name]), name


@pytest.mark.parametrize("op", ref.OP_NAMES)
def test_racy_head_always_tears_one_head_at_p_one(op, monkeypatch):
    monkeypatch.setenv("RACY_HEAD_P", "1")
    inputs = generate(make_case(op))
    first, reference = launch(getattr(racy_head, op), inputs), launch(getattr(ref, op), inputs)
    main = racy_head.MAIN_OUTPUT[op]
    torn = (first[main].float() != reference[main].float())
    if first[main].dim() == 3:
        heads = torn.any(2).any(0)
        assert heads.sum() == 1
        # the whole head is garbage (a random bf16 may still hit the right value now and then)
        assert torn[:, heads].float().mean() > 0.95
    else:
        rows = torn.any(1)
        assert rows.sum() == 1
        assert inputs.slots[rows].item() >= 0, "a row the harness compares"
    second = launch(getattr(racy_head, op), inputs)
    assert not same_bits(first[main], second[main]), "repeats differ"


@pytest.mark.parametrize("op", ref.OP_NAMES)
def test_racy_head_is_the_reference_at_p_zero(op, monkeypatch):
    monkeypatch.setenv("RACY_HEAD_P", "0")
    inputs = generate(make_case(op))
    mutant, reference = launch(getattr(racy_head, op), inputs), launch(getattr(ref, op), inputs)
    for name, g in mutant.buffers.items():
        assert same_bits(g.buffer, reference.buffers[name].buffer), name


@pytest.mark.parametrize("value", ["often", "1.5", "-0.1"])
def test_racy_head_rejects_a_bad_probability(value, monkeypatch):
    monkeypatch.setenv("RACY_HEAD_P", value)
    with pytest.raises(ValueError, match="RACY_HEAD_P"):
        racy_head.probability()


def test_hang_and_segfault_import_without_running():
    for name in ("hang", "segfault"):
        for op in ref.OP_NAMES:
            assert callable(kernel_of(name, op))
