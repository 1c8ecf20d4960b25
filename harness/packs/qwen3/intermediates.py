"""The Qwen3 ops' named intermediates (docs/intermediates.md): names, shapes in symbols
(``rows`` is ``B`` for decode, ``T`` for prefill), dataflow order, and the output whose tolerance
each is compared with."""
from __future__ import annotations

from harness.intermediates.spec import Intermediate

# The prologue of every op with QK-norm + RoPE: (name, shape symbols, upstream).
_PROLOGUE = (
    ("q_norm", ("rows", "Hq", "D"), ()),
    ("k_norm", ("rows", "Hkv", "D"), ()),
    ("q_rope", ("rows", "Hq", "D"), ("q_norm",)),
    ("k_rope", ("rows", "Hkv", "D"), ("k_norm",)),
    ("v", ("rows", "Hkv", "D"), ()),
)
_ATTN = ("attn", ("rows", "Hq", "D"), ("q_rope", "k_rope", "v"))


# The output whose tolerance an intermediate is compared with (its nearest stored relative).
TOLERANCE_OF = {"q_norm": "query", "q_rope": "query", "k_norm": "k_cache", "k_rope": "k_cache",
                "v": "v_cache", "attn": "out", "hidden": "next_hidden", "final_norm": "next_hidden"}


def _flat(items) -> tuple[Intermediate, ...]:
    return tuple(Intermediate(name, shape, up, tolerance=TOLERANCE_OF[name]) for name, shape, up in items)


_BY_OP = {
    "rope_kv_write": _flat(_PROLOGUE),
    "fused_rope_decode_attention": _flat(_PROLOGUE + (_ATTN,)),
    "prefill_attention": _flat(_PROLOGUE + (_ATTN,)),
    "paged_decode_attention": (Intermediate("attn", _ATTN[1], (), tolerance="out"),),
}

LAYER_PARTS = ("q_norm", "k_norm", "q_rope", "k_rope", "v", "attn", "hidden")


def layer_names(layer: int) -> tuple[Intermediate, ...]:
    """``layers.{l}.q_norm .. layers.{l}.hidden``: one decoder layer's intermediates."""
    p = f"layers.{layer}."
    before = (f"layers.{layer - 1}.hidden",) if layer else ()
    parts = (
        ("q_norm", ("rows", "Hq", "D"), before),
        ("k_norm", ("rows", "Hkv", "D"), before),
        ("q_rope", ("rows", "Hq", "D"), (p + "q_norm",)),
        ("k_rope", ("rows", "Hkv", "D"), (p + "k_norm",)),
        ("v", ("rows", "Hkv", "D"), before),
        ("attn", ("rows", "Hq", "D"), (p + "q_rope", p + "k_rope", p + "v")),
        ("hidden", ("rows", "H"), (p + "attn",) + before),
    )
    return tuple(Intermediate(p + name, shape, up, layer, TOLERANCE_OF[name]) for name, shape, up in parts)


def of(op: str):
    """``op``'s intermediates given a layer count (``OpEntry.intermediates``)."""
    return lambda num_layers: _BY_OP[op]


def decode_layers(num_layers: int) -> tuple[Intermediate, ...]:
    """Every layer's intermediates, then the final norm: decode_layers' in dataflow order."""
    per_layer = tuple(i for layer in range(num_layers) for i in layer_names(layer))
    last = (f"layers.{num_layers - 1}.hidden",) if num_layers else ()
    return per_layer + (Intermediate("final_norm", ("rows", "H"), last, tolerance="next_hidden"),)


