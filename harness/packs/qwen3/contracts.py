"""The Qwen3 ops' contracts (docs/contracts.md): each kernel argument by role, shape in geometry
symbols, dtype and the axes a mismatch is localised by; and what each argument's indices mean
(the layout column of the contract tables).

Roles: ``input`` read-only, generated from the seed; ``cache`` the in/out paged KV cache,
canary-filled, guard-banded, checked by slot mapping; ``output`` preallocated by the harness,
poisoned, guard-banded, compared with the golden; ``scalar`` a Python float or int.
"""
from __future__ import annotations

from harness.ops import Arg, OpSpec


def _in(name, shape, dtype="float32"):
    return Arg(name, "input", tuple(shape), dtype)


def _scalar(name, dtype="float"):
    return Arg(name, "scalar", (), dtype)


_ROPE_INPUTS = (
    _in("q_proj", ("B", "Hq*D")),
    _in("k_proj", ("B", "Hkv*D")),
    _in("v_proj", ("B", "Hkv*D")),
    _in("inv_rms", ("B", "1")),
    _in("q_norm_weight", ("D",)),
    _in("k_norm_weight", ("D",)),
    _in("rope_cos", ("max_pos", "D")),
    _in("rope_sin", ("max_pos", "D")),
    _in("positions", ("B",), "int32"),
    _in("slot_mapping", ("B",), "int32"),
)
_CACHES = (
    Arg("k_cache", "cache", ("N", "P", "Hkv", "D"), "bfloat16"),
    Arg("v_cache", "cache", ("N", "P", "Hkv", "D"), "bfloat16"),
)
_PAGING = (
    _in("block_table", ("B", "MB"), "int32"),
    _in("seq_lens", ("B",), "int32"),
)


def _out(name, shape, dtype, axes):
    return Arg(name, "output", tuple(shape), dtype, tuple(axes))


OPS: dict[str, OpSpec] = {
    "rope_kv_write": OpSpec(
        "rope_kv_write",
        _ROPE_INPUTS + (_scalar("eps"),) + _CACHES
        + (_out("query", ("B", "Hq", "D"), "bfloat16", ("batch", "head", None)),),
        writes_cache=True,
    ),
    "paged_decode_attention": OpSpec(
        "paged_decode_attention",
        (_in("query", ("B", "Hq", "D"), "bfloat16"),) + _PAGING + (_scalar("scale"),) + _CACHES
        + (_out("out", ("B", "Hq", "D"), "bfloat16", ("batch", "head", None)),),
        writes_cache=False,
    ),
    "fused_rope_decode_attention": OpSpec(
        "fused_rope_decode_attention",
        _ROPE_INPUTS + _PAGING + (_scalar("scale"), _scalar("eps")) + _CACHES
        + (
            _out("out", ("B", "Hq", "D"), "bfloat16", ("batch", "head", None)),
            _out("query", ("B", "Hq", "D"), "bfloat16", ("batch", "head", None)),
        ),
        writes_cache=True,
        slot_masked_outputs=("out",),
    ),
    "prefill_attention": OpSpec(
        "prefill_attention",
        (
            _in("q_proj", ("T", "Hq*D")),
            _in("k_proj", ("T", "Hkv*D")),
            _in("v_proj", ("T", "Hkv*D")),
            _in("inv_rms", ("T", "1")),
            _in("q_norm_weight", ("D",)),
            _in("k_norm_weight", ("D",)),
            _in("rope_cos", ("max_pos", "D")),
            _in("rope_sin", ("max_pos", "D")),
            _in("positions", ("T",), "int32"),
            _in("slot_mapping", ("T",), "int32"),
            _in("cu_seqlens", ("B+1",), "int32"),
            _in("context_lens", ("B",), "int32"),
            _in("block_table", ("B", "MB"), "int32"),
            _scalar("scale"),
            _scalar("eps"),
        )
        + _CACHES
        + (_out("out", ("T", "Hq", "D"), "bfloat16", ("token", "head", None)),),
        writes_cache=True,
    ),
    "decode_layers": OpSpec(
        "decode_layers",
        (
            _in("hidden", ("B", "H"), "bfloat16"),
            _in("input_rms_weight", ("H",)),
            _in("post_rms_weight", ("H",)),
            _in("q_norm_weight", ("D",)),
            _in("k_norm_weight", ("D",)),
            _in("final_norm_weight", ("H",)),
            _in("wq", ("H", "Hq*D"), "bfloat16"),
            _in("wk", ("H", "Hkv*D"), "bfloat16"),
            _in("wv", ("H", "Hkv*D"), "bfloat16"),
            _in("wo", ("Hq*D", "H"), "bfloat16"),
            _in("w_gate", ("H", "I"), "bfloat16"),
            _in("w_up", ("H", "I"), "bfloat16"),
            _in("w_down", ("I", "H"), "bfloat16"),
            _in("lm_head", ("V", "H"), "bfloat16"),
            _in("rope_cos", ("max_pos", "D")),
            _in("rope_sin", ("max_pos", "D")),
            _in("positions", ("B",), "int32"),
            _in("slot_mapping", ("B",), "int32"),
            _in("block_table", ("B", "MB"), "int32"),
            _in("seq_lens", ("B",), "int32"),
            _scalar("num_layers", "int"),
            _scalar("scale"),
            _scalar("eps"),
            Arg("k_cache", "cache", ("L", "N", "P", "Hkv", "D"), "bfloat16"),
            Arg("v_cache", "cache", ("L", "N", "P", "Hkv", "D"), "bfloat16"),
            _out("logits", ("B", "V"), "float32", ("batch", None)),
            _out("next_hidden", ("B", "H"), "bfloat16", ("batch", None)),
        ),
        writes_cache=True,
        slot_masked_outputs=("logits", "next_hidden"),
    ),
}


_ROW_B = "row `b`, column `h*D + d`"
_NORM = "per dim, shared by every head"
_ROPE = "row = position; NeoX halves"
_SLOT_B = "cache slot of row `b`; `< 0`: do not write"
_BLOCKS = "page of block `j` of sequence `b`; `-1` past its end"
_CACHE = "page, offset, KV head, dim"
_HEADS = "row, head, dim"
_SCALE = "`1/sqrt(D)`"
_EPS = "QK-norm epsilon"
_SEQ_LENS = "positions of sequence `b`, the current one included"
_PROLOGUE = {
    "q_proj": _ROW_B, "k_proj": _ROW_B, "v_proj": _ROW_B, "inv_rms": "one factor per row",
    "q_norm_weight": _NORM, "k_norm_weight": _NORM, "rope_cos": _ROPE, "rope_sin": _ROPE,
}

# What the indices of each argument mean, per op.
LAYOUTS: dict[str, dict[str, str]] = {
    "rope_kv_write": {
        **_PROLOGUE, "q_proj": "row `b`, column `h*D + d`: head `h`, dim `d`",
        "positions": "position of row `b`", "slot_mapping": _SLOT_B, "eps": _EPS,
        "k_cache": _CACHE, "v_cache": _CACHE, "query": _HEADS,
    },
    "paged_decode_attention": {
        "query": _HEADS, "block_table": _BLOCKS, "seq_lens": "positions of sequence `b` to attend to",
        "scale": _SCALE, "k_cache": _CACHE, "v_cache": _CACHE, "out": _HEADS,
    },
    "fused_rope_decode_attention": {
        **_PROLOGUE, "positions": "position of row `b` (`seq_lens[b] - 1`)", "slot_mapping": _SLOT_B,
        "block_table": _BLOCKS, "seq_lens": _SEQ_LENS, "scale": _SCALE, "eps": _EPS,
        "k_cache": _CACHE, "v_cache": _CACHE, "out": _HEADS, "query": _HEADS,
    },
    "prefill_attention": {
        **_PROLOGUE, "q_proj": "token `t`, column `h*D + d`", "k_proj": "token `t`, column `h*D + d`",
        "v_proj": "token `t`, column `h*D + d`", "inv_rms": "one factor per token",
        "positions": "position of token `t` (`context_lens[b] + i`)",
        "slot_mapping": "cache slot of token `t`; `< 0`: do not write",
        "cu_seqlens": "sequence `b`'s tokens are `cu_seqlens[b] .. cu_seqlens[b+1]-1`",
        "context_lens": "positions of sequence `b` already in the cache", "block_table": _BLOCKS,
        "scale": _SCALE, "eps": _EPS, "k_cache": _CACHE, "v_cache": _CACHE, "out": "token, head, dim",
    },
    "decode_layers": {
        "hidden": "row, feature", "input_rms_weight": "per feature", "post_rms_weight": "per feature",
        "q_norm_weight": _NORM, "k_norm_weight": _NORM, "final_norm_weight": "per feature",
        "wq": "`[in, out]`: `x @ wq`", "wk": "`[in, out]`", "wv": "`[in, out]`", "wo": "`[in, out]`",
        "w_gate": "`[in, out]`", "w_up": "`[in, out]`", "w_down": "`[in, out]`",
        "lm_head": "`[vocab, hidden]`: `x @ lm_head.T`", "rope_cos": _ROPE, "rope_sin": _ROPE,
        "positions": "position of row `b` (`seq_lens[b] - 1`)",
        "slot_mapping": "cache slot of row `b` in every layer; `< 0`: do not write",
        "block_table": "page of block `j` of sequence `b`, every layer; `-1` past its end",
        "seq_lens": _SEQ_LENS, "num_layers": "`L`", "scale": _SCALE, "eps": "epsilon of every norm",
        "k_cache": "layer, " + _CACHE, "v_cache": "layer, " + _CACHE,
        "logits": "row, vocab entry", "next_hidden": "row, feature",
    },
}
