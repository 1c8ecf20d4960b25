"""The op contract tables (docs/contracts.md, ``harness ops``) built from the packs' declarations.

One row per kernel argument, in contract order: name, role, shape (in symbols,
or in numbers for a geometry), dtype, layout, what the kernel may write, whether it
may return it.  Role, shape and dtype are the contract's (``OpSpec``); what a kernel may write and
return follow from the roles and the op's flags as the checks apply them; the
layout, what the indices mean, is the pack's prose (``OpEntry.layouts``).  docs/contracts.md holds these
tables as ``markdown_table`` prints them (a test keeps them equal).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harness import packs
from harness.ops import OPS, Arg, OpSpec, resolve_dim

COLUMNS = ("argument", "role", "shape", "dtype", "layout", "kernel writes", "returned")


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
    condition = None
    if isinstance(op, str):
        declared = packs.entry(op)
        layouts, condition = (declared.layouts if layouts is None else layouts), declared.write_condition
    return tuple(ArgRow(a.name, a.role, _shape(a, sizes), a.dtype, layouts[a.name], _writes(spec, a, condition),
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


def _writes(spec: OpSpec, arg: Arg, condition: str | None) -> str:
    """What the kernel may change in ``arg``: what the checks let it change (``condition``: the
    pack's words for a row that is written)."""
    if arg.role == "scalar":
        return "–"
    if arg.role == "input" or (arg.role == "cache" and not spec.writes_cache):
        return "nothing"
    if arg.role == "cache":
        return ("in each layer, " if arg.shape[0] == "L" else "") + f"the rows at {condition}"
    if arg.name in spec.slot_masked_outputs:
        return f"every element of rows with {condition} (others: anything)"
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
