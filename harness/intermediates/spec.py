"""Which intermediates each op has, their shapes, dataflow order and inputs (torch-free).

The names and shapes are part of the kernel contract (docs/intermediates.md).  ``rows`` is
``B`` (decode) or ``T`` (prefill).  ``upstream`` of an intermediate are the intermediates it
consumes directly: a bad intermediate is ``inherited`` when one of those was dumped and is
bad (or inherited) itself.

A spec op (docs/specs.md) declares its own: ``INTERMEDIATES`` in its module, names in dataflow
order (``declared``).  Their shapes are whatever its golden dumps (``shape`` is empty: the
golden's is the contract), they are localised along ``dim0``, ``dim1``, ... and compared with
the case's tolerance.  The worker's collector and the offline command read either kind.

``declares_dump``: whether a kernel, or a spec op's golden, is given ``dump`` (it declares it).
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# The prologue of every op with QK-norm + RoPE: (name, shape symbols, upstream).
_PROLOGUE = (
    ("q_norm", ("rows", "Hq", "D"), ()),
    ("k_norm", ("rows", "Hkv", "D"), ()),
    ("q_rope", ("rows", "Hq", "D"), ("q_norm",)),
    ("k_rope", ("rows", "Hkv", "D"), ("k_norm",)),
    ("v", ("rows", "Hkv", "D"), ()),
)
_ATTN = ("attn", ("rows", "Hq", "D"), ("q_rope", "k_rope", "v"))

# Per intermediate: which axis names localise it (as the outputs' axes do).
_AXES = {("rows", "Hq", "D"): ("row", "head", None), ("rows", "Hkv", "D"): ("row", "kv_head", None),
         ("rows", "H"): ("row", None)}

# The output whose tolerance an intermediate is compared with (its nearest stored relative).
_TOLERANCE_OF = {"q_norm": "query", "q_rope": "query", "k_norm": "k_cache", "k_rope": "k_cache",
                 "v": "v_cache", "attn": "out", "hidden": "next_hidden", "final_norm": "next_hidden"}


@dataclass(frozen=True)
class Intermediate:
    name: str                       # "k_rope", "layers.3.attn"
    shape: tuple[str, ...]          # symbols: rows, Hq, Hkv, D, H
    upstream: tuple[str, ...]       # the intermediates it consumes directly
    layer: int | None = None        # decode_layers: the layer it belongs to
    tolerance: str | None = None    # a spec op's: the output whose tolerance it takes

    @property
    def declared(self) -> bool:
        """A spec op's intermediate: its shape is its golden's (no symbols)."""
        return not self.shape

    @property
    def base(self) -> str:
        """The name without its layer prefix: ``layers.3.attn`` -> ``attn``."""
        return self.name.rsplit(".", 1)[-1]

    @property
    def axes(self) -> tuple[str | None, ...]:
        return _AXES[self.shape]

    def axes_for(self, ndim: int) -> tuple[str | None, ...]:
        """The axes to localise a tensor of ``ndim`` dims by: the symbols' names, or ``dim0``, ..."""
        return tuple(f"dim{i}" for i in range(ndim)) if self.declared else self.axes

    @property
    def tolerance_of(self) -> str:
        return self.tolerance or _TOLERANCE_OF[self.base]


def _flat(items) -> tuple[Intermediate, ...]:
    return tuple(Intermediate(name, shape, up) for name, shape, up in items)


_BY_OP = {
    "rope_kv_write": _flat(_PROLOGUE),
    "fused_rope_decode_attention": _flat(_PROLOGUE + (_ATTN,)),
    "prefill_attention": _flat(_PROLOGUE + (_ATTN,)),
    "paged_decode_attention": (Intermediate("attn", _ATTN[1], ()),),
}

LAYER_PARTS = ("q_norm", "k_norm", "q_rope", "k_rope", "v", "attn", "hidden")


def layer_names(layer: int) -> tuple[Intermediate, ...]:
    """``layers.{l}.q_norm .. layers.{l}.hidden``: one decoder layer's intermediates."""
    p = f"layers.{layer}."
    before = (f"layers.{layer - 1}.hidden",) if layer else ()
    return (
        Intermediate(p + "q_norm", ("rows", "Hq", "D"), before, layer),
        Intermediate(p + "k_norm", ("rows", "Hkv", "D"), before, layer),
        Intermediate(p + "q_rope", ("rows", "Hq", "D"), (p + "q_norm",), layer),
        Intermediate(p + "k_rope", ("rows", "Hkv", "D"), (p + "k_norm",), layer),
        Intermediate(p + "v", ("rows", "Hkv", "D"), before, layer),
        Intermediate(p + "attn", ("rows", "Hq", "D"), (p + "q_rope", p + "k_rope", p + "v"), layer),
        Intermediate(p + "hidden", ("rows", "H"), (p + "attn",) + before, layer),
    )


def intermediates(op: str, num_layers: int = 0) -> tuple[Intermediate, ...]:
    """Every intermediate of ``op`` in dataflow order (``num_layers``: decode_layers' layer count)."""
    if op == "decode_layers":
        per_layer = tuple(i for layer in range(num_layers) for i in layer_names(layer))
        last = (f"layers.{num_layers - 1}.hidden",) if num_layers else ()
        return per_layer + (Intermediate("final_norm", ("rows", "H"), last),)
    return _BY_OP.get(op, ())


def declared(entries, tolerance: str) -> tuple[Intermediate, ...]:
    """A spec op's intermediates from its case's ``spec["intermediates"]``: ``[name, upstream]``
    pairs in dataflow order (``harness.worker.spec_check`` read them from ``INTERMEDIATES``);
    ``tolerance``: the output whose tolerance they take."""
    return tuple(Intermediate(str(name), (), tuple(up), None, tolerance) for name, up in entries)


def tolerance_output(op: str, item: Intermediate) -> str:
    """The output whose tolerance ``item`` is compared with.  In ``decode_layers`` every matmul
    takes bf16 activations against an fp32 golden, so each layer's intermediates carry that
    rounding (as ``next_hidden`` does): they take ``next_hidden``'s tolerance."""
    return "next_hidden" if op == "decode_layers" else item.tolerance_of


def shape_of(item: Intermediate, sizes: Mapping[str, int], rows: int) -> tuple[int, ...]:
    """The concrete shape of ``item`` for a case with these geometry ``sizes``."""
    return tuple(rows if sym == "rows" else int(sizes[sym]) for sym in item.shape)


def declares_dump(fn: Callable) -> bool:
    """``fn`` declares a keyword parameter ``dump`` (``**kwargs`` alone does not count): a
    kernel, or a spec op's golden, that dumps its intermediates (docs/intermediates.md)."""
    try:
        p = inspect.signature(fn).parameters.get("dump")
    except (TypeError, ValueError):
        return False
    return p is not None and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
