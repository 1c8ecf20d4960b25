"""The op contract tables (docs/contracts.md, ``harness ops``) built from ``harness/ops.py``.

One row per kernel argument, in contract order: name, role, shape (in symbols,
or in numbers for a geometry), dtype, layout, what the kernel may write, whether it
may return it.  Role, shape and dtype are ``ops.py``'s; what a kernel may write and
return follow from the roles and the op's flags as the checks apply them; the
layout, what the indices mean, is the prose below.  docs/contracts.md holds these
tables as ``markdown_table`` prints them (a test keeps them equal).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harness.ops import OPS, Arg, OpSpec, resolve_dim

COLUMNS = ("argument", "role", "shape", "dtype", "layout", "kernel writes", "returned")

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


@dataclass(frozen=True)
class ArgRow:
    """One argument of an op's contract table; cells are Markdown (backticks for code)."""

    argument: str
    role: str
    shape: str
    dtype: str
    layout: str
    writes: str
    returned: str

    @property
    def cells(self) -> tuple[str, ...]:
        return (f"`{self.argument}`", self.role, f"`{self.shape}`", f"`{self.dtype}`", self.layout, self.writes,
                self.returned)


def contract_rows(op: str | OpSpec, sizes: Mapping[str, int] | None = None,
                  layouts: Mapping[str, str] | None = None) -> tuple[ArgRow, ...]:
    """``op``'s arguments in contract order (a builtin op's name, or a spec op's ``OpSpec``, with
    ``layouts`` from ``spec_layouts``); with ``sizes`` (``case.shape_sizes``), every symbol they
    resolve is shown as its number."""
    spec = OPS[op] if isinstance(op, str) else op
    layouts = LAYOUTS[spec.name] if layouts is None else layouts
    return tuple(ArgRow(a.name, a.role, _shape(a, sizes), a.dtype, layouts[a.name], _writes(spec, a),
                        _returned(spec, a)) for a in spec.args)


def spec_layouts(table) -> dict[str, str]:
    """A spec op's layout column from its case's table (``Case.spec["args"]``): each tensor's dims
    by name (``dim0, dim1`` unless the spec names them), each scalar's value."""
    out = {}
    for row in table:
        if row["role"] == "scalar":
            out[row["name"]] = f"value `{row.get('value')!r}`"
        else:
            dims = row.get("dims") or [f"dim{i}" for i in range(len(row.get("shape") or ()))]
            out[row["name"]] = ", ".join(dims) or "a single element"
    return out


def _shape(arg: Arg, sizes: Mapping[str, int] | None) -> str:
    dims = [resolve_dim(sym, sizes) if sizes is not None else None for sym in arg.shape]
    return "[" + ", ".join(sym if dim is None else str(dim) for sym, dim in zip(arg.shape, dims)) + "]"


def _valid_slot(spec: OpSpec) -> str:
    """A written row's condition; its index is ``b`` (a batch row) or ``t`` (a prefill token)."""
    return f"`slot_mapping[{spec.arg('slot_mapping').shape[0].lower()}] ≥ 0`"


def _writes(spec: OpSpec, arg: Arg) -> str:
    """What the kernel may change in ``arg``: what the checks let it change."""
    if arg.role == "scalar":
        return "–"
    if arg.role == "input" or (arg.role == "cache" and not spec.writes_cache):
        return "nothing"
    if arg.role == "cache":
        return ("in each layer, " if arg.shape[0] == "L" else "") + f"the rows at {_valid_slot(spec)}"
    if arg.name in spec.slot_masked_outputs:
        return f"every element of rows with {_valid_slot(spec)} (others: anything)"
    return "every element"


def _returned(spec: OpSpec, arg: Arg) -> str:
    """The launcher's return rule: None, the first output, or every output as a tuple."""
    if arg.role != "output":
        return "no"
    if arg == spec.outputs[0]:
        return "first output"
    return "in the tuple or dict only" if spec.returns_by_name else "in the tuple only"


def markdown_table(rows: tuple[ArgRow, ...]) -> list[str]:
    return [_md_line(COLUMNS), _md_line(("---",) * len(COLUMNS)).replace(" ", ""),
            *(_md_line(r.cells) for r in rows)]


def _md_line(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def text_table(rows: tuple[ArgRow, ...]) -> list[str]:
    """Aligned columns for a terminal: the Markdown cells without backticks."""
    table = [COLUMNS, *(tuple(c.replace("`", "") for c in r.cells) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS) - 1)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(line, widths)), line[-1]]).rstrip() for line in table]
