"""The goldens, rounding off, against transformers' Qwen3 on the inputs the harness generates.

A tiny random ``Qwen3Config`` (GQA 4 query heads over 2 KV heads, head_dim 64,
rope_theta 1e6, eps 1e-6, 3 layers) and a ``Geometry`` with the same figures;
``harness.worker.inputs.generate`` makes the op arguments (the real layout: paged
caches with random page order, block tables, positions, NeoX rope tables), and
each op's golden (``goldens.compute(..., exact=True)``; the ``@exact`` names where
the golden rounds q/k/v before attention) must equal what transformers computes
from the same arguments to ``TOLERANCE`` in fp32.  docs/contracts.md, "A
transformers Qwen3 model as op arguments", states the mapping these tests use.

Mutants prove the comparison can fail: a golden with GPT-J RoPE, with the k-norm
weight unapplied, or with the KV heads tiled instead of repeated (query head ``h``
reading KV head ``h % Hkv``) differs from transformers far beyond ``TOLERANCE``.
"""
from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, Qwen3Config, Qwen3ForCausalLM
from transformers.masking_utils import create_causal_mask
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3Attention, Qwen3RMSNorm, Qwen3RotaryEmbedding, apply_rotary_pos_emb, eager_attention_forward,
)

from harness import goldens, packs
from harness.case import Case, Geometry, SeqLens, SlotMode
from harness.goldens import common
from harness.goldens import decode_layers as layers_golden
from harness.goldens import prefill_attention as prefill_golden
from harness.worker.inputs import generate
from harness.packs.qwen3.inputs import rope_tables

F32 = torch.float32
# max |ours - transformers| / max |transformers| per output: fp32 summation order only.
TOLERANCE = 1e-5

GEOMETRY = Geometry(batch=4, num_heads=4, num_kv_heads=2, head_dim=64, page_size=16, hidden=128,
                    intermediate=256, vocab=512, num_layers=3, rope_theta=1_000_000.0, eps=1e-6)
PROLOGUE_OPS = ("rope_kv_write", "fused_rope_decode_attention", "prefill_attention", "decode_layers")
# the ops transformers' Qwen3 computes: the Qwen3 pack's (another pack's ops are not Qwen3's)
QWEN3_OPS = tuple(op for op in goldens.ops() if packs.pack_of(op).name == "qwen3")


def qwen3_config(geo: Geometry = GEOMETRY) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=geo.vocab, hidden_size=geo.hidden, intermediate_size=geo.intermediate,
        num_hidden_layers=geo.num_layers, num_attention_heads=geo.num_heads, num_key_value_heads=geo.num_kv_heads,
        head_dim=geo.head_dim, rms_norm_eps=geo.eps, rope_theta=geo.rope_theta, hidden_act="silu",
        attention_bias=False, tie_word_embeddings=False, attn_implementation="eager",
    )


def make_case(op: str, seed: int = 7) -> Case:
    # multi_block: lengths around page boundaries, up to 4 pages (positions < 64); random pages.
    return Case(f"{op}[xcheck]", "unit", "tests/unit/test_goldens_vs_transformers.py", op, "reference", GEOMETRY,
                SeqLens("multi_block"), SlotMode("random"), seed,
                chunk_size=8 if op == "prefill_attention" else None)


def relative_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((ours.to(F32) - theirs).abs().max() / theirs.abs().max())


def golden(op: str, args: dict) -> dict[str, torch.Tensor]:
    """The golden with rounding off: ``<name>@exact`` where the op has one, else the plain golden (exact already)."""
    result = goldens.compute(op, args, F32, exact=True)
    return {name: result.get(name + goldens.EXACT_SUFFIX, result[name]) for name in goldens.output_names(op)}


# -- transformers' side ----------------------------------------------------------------------------

def rotary(config: Qwen3Config, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``Qwen3RotaryEmbedding``'s cos, sin ``[len(positions), D]``."""
    cos, sin = Qwen3RotaryEmbedding(config)(torch.zeros(1, dtype=F32), positions.long()[None])
    return cos[0], sin[0]


def attention_module(config: Qwen3Config, args: dict) -> Qwen3Attention:
    """A ``Qwen3Attention`` with the op's QK-norm weights, if it has them (its projections are not used)."""
    attn = Qwen3Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        for norm in ("q_norm", "k_norm"):
            if f"{norm}_weight" in args:
                getattr(attn, norm).weight.copy_(args[f"{norm}_weight"])
    return attn


def prologue(attn: Qwen3Attention, config: Qwen3Config, args: dict):
    """q ``[rows, Hq, D]``, k, v ``[rows, Hkv, D]`` as ``Qwen3Attention.forward`` makes them after its projections.

    Each row is a batch entry of one token at its own position; the op's ``proj * inv_rms`` is
    what ``Qwen3Attention``'s q/k/v_proj return on the input-normed hidden state.
    """
    rows, head_dim = args["q_proj"].shape[0], attn.head_dim
    q, k, v = ((args[name] * args["inv_rms"]).view(rows, 1, -1, head_dim) for name in ("q_proj", "k_proj", "v_proj"))
    q, k, v = attn.q_norm(q).transpose(1, 2), attn.k_norm(k).transpose(1, 2), v.transpose(1, 2)
    cos, sin = rotary(config, args["positions"])
    q, k = apply_rotary_pos_emb(q, k, cos[:, None], sin[:, None])
    return q[:, :, 0], k[:, :, 0], v[:, :, 0]


def cached(cache: torch.Tensor, block_row: torch.Tensor, count: int) -> torch.Tensor:
    """Positions ``0..count-1`` of one sequence from a paged cache, ``[1, Hkv, count, D]`` (transformers' layout)."""
    pos = torch.arange(count)
    page_size = cache.shape[1]
    return cache[block_row[pos // page_size].long(), pos % page_size].to(F32).transpose(0, 1)[None]


def heads_first(x: torch.Tensor) -> torch.Tensor:
    """``[n, H, D] -> [1, H, n, D]``."""
    return x.transpose(0, 1)[None]


def attend(attn: Qwen3Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           mask: torch.Tensor | None = None) -> torch.Tensor:
    """``eager_attention_forward`` (GQA through its ``repeat_kv``) of ``q [1, Hq, m, D]``; returns ``[m, Hq, D]``."""
    out, _ = eager_attention_forward(attn, q, k, v, mask, scaling=attn.scaling)
    return out[0]


def transformers_rope_kv_write(config: Qwen3Config, args: dict) -> dict[str, torch.Tensor]:
    q, k, v = prologue(attention_module(config, args), config, args)
    return {"query": q, "k_cache": k, "v_cache": v}


def transformers_paged_decode_attention(config: Qwen3Config, args: dict) -> dict[str, torch.Tensor]:
    attn = attention_module(config, args)
    out = [attend(attn, heads_first(args["query"][b:b + 1].to(F32)), cached(args["k_cache"], args["block_table"][b], n),
                  cached(args["v_cache"], args["block_table"][b], n))[0]
           for b, n in enumerate(args["seq_lens"].tolist())]
    return {"out": torch.stack(out)}


def transformers_fused_rope_decode_attention(config: Qwen3Config, args: dict) -> dict[str, torch.Tensor]:
    attn = attention_module(config, args)
    q, k, v = prologue(attn, config, args)
    out = []
    for b, n in enumerate(args["seq_lens"].tolist()):
        keys = torch.cat([cached(args["k_cache"], args["block_table"][b], n - 1), heads_first(k[b:b + 1])], dim=2)
        values = torch.cat([cached(args["v_cache"], args["block_table"][b], n - 1), heads_first(v[b:b + 1])], dim=2)
        out.append(attend(attn, heads_first(q[b:b + 1]), keys, values)[0])
    return {"out": torch.stack(out), "query": q, "k_cache": k, "v_cache": v}


def transformers_prefill_attention(config: Qwen3Config, args: dict) -> dict[str, torch.Tensor]:
    """Per sequence: a ``DynamicCache`` holding the paged context, the chunk appended, transformers' causal mask."""
    attn = attention_module(config, args)
    q, k, v = prologue(attn, config, args)
    cu = args["cu_seqlens"].tolist()
    out = []
    for b, context in enumerate(args["context_lens"].tolist()):
        lo, hi = cu[b], cu[b + 1]
        cache = DynamicCache(config=config)
        if context:
            cache.update(cached(args["k_cache"], args["block_table"][b], context),
                         cached(args["v_cache"], args["block_table"][b], context), 0)
        mask = create_causal_mask(config=config, inputs_embeds=torch.zeros(1, hi - lo, config.hidden_size),
                                  attention_mask=None, cache=cache, position_ids=args["positions"][None, lo:hi].long())
        keys, values = cache.update(heads_first(k[lo:hi]), heads_first(v[lo:hi]), 0)
        out.append(attend(attn, heads_first(q[lo:hi]), keys, values, mask))
    return {"out": torch.cat(out), "k_cache": k, "v_cache": v}


def qwen3_model(config: Qwen3Config, args: dict) -> Qwen3ForCausalLM:
    """``Qwen3ForCausalLM`` with the op's one generated layer copied into every layer."""
    model = Qwen3ForCausalLM(config).eval()
    linear = {"q_proj": "wq", "k_proj": "wk", "v_proj": "wv", "o_proj": "wo"}
    mlp = {"gate_proj": "w_gate", "up_proj": "w_up", "down_proj": "w_down"}
    with torch.no_grad():
        for layer in model.model.layers:
            for module, name in linear.items():
                getattr(layer.self_attn, module).weight.copy_(args[name].T)   # ours [in, out], nn.Linear [out, in]
            for module, name in mlp.items():
                getattr(layer.mlp, module).weight.copy_(args[name].T)
            layer.self_attn.q_norm.weight.copy_(args["q_norm_weight"])
            layer.self_attn.k_norm.weight.copy_(args["k_norm_weight"])
            layer.input_layernorm.weight.copy_(args["input_rms_weight"])
            layer.post_attention_layernorm.weight.copy_(args["post_rms_weight"])
        model.model.norm.weight.copy_(args["final_norm_weight"])
        model.lm_head.weight.copy_(args["lm_head"])                          # [V, H] both
    return model


def transformers_decode_layers(config: Qwen3Config, args: dict) -> dict[str, torch.Tensor]:
    """Per row: ``Qwen3ForCausalLM`` on the row's hidden state; a ``DynamicCache`` holds each layer's paged context."""
    model = qwen3_model(config, args)
    residual: list[torch.Tensor] = []
    hook = model.model.norm.register_forward_pre_hook(lambda _, inputs: residual.append(inputs[0][0, 0]))
    logits, k_rows, v_rows = [], [], []
    try:
        for b, n in enumerate(args["seq_lens"].tolist()):
            cache = DynamicCache(config=config)
            for layer in range(config.num_hidden_layers):
                if n > 1:
                    cache.update(cached(args["k_cache"][layer], args["block_table"][b], n - 1),
                                 cached(args["v_cache"][layer], args["block_table"][b], n - 1), layer)
            result = model(inputs_embeds=args["hidden"][None, b:b + 1].to(F32),
                           position_ids=args["positions"][None, b:b + 1].long(), cache=cache, use_cache=True)
            logits.append(result.logits[0, 0])
            k_rows.append(torch.stack([cache.layers[layer].keys[0, :, -1] for layer in range(len(cache.layers))]))
            v_rows.append(torch.stack([cache.layers[layer].values[0, :, -1] for layer in range(len(cache.layers))]))
    finally:
        hook.remove()
    return {"logits": torch.stack(logits), "next_hidden": torch.stack(residual),
            "k_cache": torch.stack(k_rows, dim=1), "v_cache": torch.stack(v_rows, dim=1)}


TRANSFORMERS = {
    "rope_kv_write": transformers_rope_kv_write,
    "paged_decode_attention": transformers_paged_decode_attention,
    "fused_rope_decode_attention": transformers_fused_rope_decode_attention,
    "prefill_attention": transformers_prefill_attention,
    "decode_layers": transformers_decode_layers,
}


def errors(op: str, golden_args: dict, seed: int = 7) -> dict[str, float]:
    """Relative error of each golden output against transformers on the same generated inputs."""
    args = generate(make_case(op, seed)).args
    with torch.no_grad():
        theirs = TRANSFORMERS[op](qwen3_config(), args)
        ours = golden(op, golden_args(args))
    assert set(theirs) == set(goldens.output_names(op))
    return {name: relative_error(ours[name], theirs[name]) for name in theirs}


# -- the goldens agree ------------------------------------------------------------------------------

def test_rope_tables_are_qwen3_rotary_embedding():
    case = make_case("rope_kv_write")
    cos, sin = rope_tables(case.max_pos, GEOMETRY.head_dim, GEOMETRY.rope_theta)
    theirs_cos, theirs_sin = rotary(qwen3_config(), torch.arange(case.max_pos))
    assert relative_error(cos, theirs_cos) <= TOLERANCE
    assert relative_error(sin, theirs_sin) <= TOLERANCE
    # the table the generator hands the kernel is that table
    args = generate(case).args
    assert torch.equal(args["rope_cos"], cos) and torch.equal(args["rope_sin"], sin)
    # a GPT-J (interleaved) table is not
    half = GEOMETRY.head_dim // 2
    assert relative_error(cos[:, :half].repeat_interleave(2, dim=-1), theirs_cos) > 100 * TOLERANCE


@pytest.mark.parametrize("seed", [7, 8])
@pytest.mark.parametrize("op", QWEN3_OPS)
def test_golden_equals_transformers_qwen3(op, seed):
    found = errors(op, lambda args: args, seed)
    assert all(error <= TOLERANCE for error in found.values()), found


def test_inv_rms_is_the_input_norm_folded_into_the_projections():
    """``Qwen3Attention.forward`` on ``input_layernorm(x)`` is the fused op given ``(x * g) @ W.T`` and ``1/rms(x)``.

    The projections and ``inv_rms`` are made from a hidden state and a random attention's
    weights; every other argument (QK-norm weights, tables, positions, paged cache) is generated.
    """
    config = qwen3_config()
    args = generate(make_case("fused_rope_decode_attention")).args
    g = torch.Generator().manual_seed(3)
    attn = attention_module(config, args)
    input_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
    with torch.no_grad():
        input_norm.weight.copy_(1 + 0.1 * torch.randn(config.hidden_size, generator=g))
        for linear in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj):
            linear.weight.copy_(torch.randn(linear.weight.shape, generator=g) / linear.in_features ** 0.5)
    x = torch.randn(GEOMETRY.batch, config.hidden_size, generator=g)
    folded = dict(args, inv_rms=torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + config.rms_norm_eps),
                  **{name: (x * input_norm.weight).detach() @ getattr(attn, name).weight.detach().T
                     for name in ("q_proj", "k_proj", "v_proj")})

    attended: list[torch.Tensor] = []
    hook = attn.o_proj.register_forward_pre_hook(lambda _, inputs: attended.append(inputs[0][0, 0]))
    out, k_rows, v_rows = [], [], []
    with torch.no_grad():
        for b, n in enumerate(args["seq_lens"].tolist()):
            cache = DynamicCache(config=config)
            if n > 1:
                cache.update(cached(args["k_cache"], args["block_table"][b], n - 1),
                             cached(args["v_cache"], args["block_table"][b], n - 1), 0)
            cos, sin = rotary(config, args["positions"][b:b + 1])
            attn(input_norm(x[None, b:b + 1]), position_embeddings=(cos[None], sin[None]), attention_mask=None,
                 cache=cache)
            out.append(attended[-1].view(GEOMETRY.num_heads, GEOMETRY.head_dim))
            k_rows.append(cache.layers[0].keys[0, :, -1])
            v_rows.append(cache.layers[0].values[0, :, -1])
        ours = golden("fused_rope_decode_attention", folded)
    hook.remove()
    theirs = {"out": torch.stack(out), "k_cache": torch.stack(k_rows), "v_cache": torch.stack(v_rows)}
    found = {name: relative_error(ours[name], theirs[name]) for name in theirs}
    assert all(error <= TOLERANCE for error in found.values()), found
    assert len(attended) == GEOMETRY.batch
    # without inv_rms (the input norm dropped) v is off by the row's 1/rms(x)
    unscaled = golden("fused_rope_decode_attention", dict(folded, inv_rms=torch.ones_like(folded["inv_rms"])))
    assert relative_error(unscaled["v_cache"], theirs["v_cache"]) > 100 * TOLERANCE


# -- and would not if they were wrong ---------------------------------------------------------------

def gptj_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE over interleaved pairs (GPT-J), at the frequencies of the NeoX tables given."""
    half = x.shape[-1] // 2
    cos, sin = (t[:, None, :half].repeat_interleave(2, dim=-1) for t in (cos, sin))
    rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
    return x * cos + rotated * sin


def unweighted_k_norm(args: dict) -> dict:
    return dict(args, k_norm_weight=torch.ones_like(args["k_norm_weight"]))


def tiled_gqa(attend):
    """``attend`` with query head ``h`` reading KV head ``h % Hkv`` (the KV heads tiled, not repeated)."""
    def wrong(q, k, v, scale, visible=None):
        group = q.shape[1] // k.shape[1]
        return attend(q, k.repeat(1, group, 1), v.repeat(1, group, 1), scale, visible)
    return wrong


@pytest.mark.parametrize(("mutant", "op"), [
    *(("gptj_rope", op) for op in PROLOGUE_OPS),
    *(("k_norm_unapplied", op) for op in PROLOGUE_OPS),
    *(("tiled_gqa", op) for op in QWEN3_OPS if op != "rope_kv_write"),
])
def test_a_wrong_golden_differs_from_transformers(mutant, op, monkeypatch):
    golden_args = unweighted_k_norm if mutant == "k_norm_unapplied" else (lambda args: args)
    if mutant == "gptj_rope":
        monkeypatch.setattr(common, "rope", gptj_rope)
        monkeypatch.setattr(layers_golden, "rope", gptj_rope)     # it applies RoPE after recording q_norm
    if mutant == "tiled_gqa":
        monkeypatch.setattr(common, "attend", tiled_gqa(common.attend))
        monkeypatch.setattr(prefill_golden, "attend", tiled_gqa(prefill_golden.attend))
    found = errors(op, golden_args)
    assert max(found.values()) > 100 * TOLERANCE, found
