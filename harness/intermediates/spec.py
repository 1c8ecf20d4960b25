"""Which intermediates each op has, their shapes, dataflow order and inputs (torch-free).

The names and shapes are part of the kernel contract (docs/intermediates.md); each pack declares
its ops' (``OpEntry.intermediates``).  ``rows`` is the symbol of the rows one launch writes.  ``upstream`` of an intermediate are the intermediates it
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

from harness import packs
from harness.ops import resolve_shape

# Per intermediate: which axis names localise it (as the outputs' axes do).
_AXES = {("rows", "Hq", "D"): ("row", "head", None), ("rows", "Hkv", "D"): ("row", "kv_head", None),
         ("rows", "H"): ("row", None)}


@dataclass(frozen=True)
class Intermediate:
    name: str                       # "k_rope", "layers.3.attn"
    shape: tuple[str, ...]          # symbols: rows (the rows one launch writes) and the geometry's
    upstream: tuple[str, ...]       # the intermediates it consumes directly
    layer: int | None = None        # an op that stacks layers: the layer it belongs to
    tolerance: str = ""              # the output whose tolerance it takes

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
        """Named for the symbols a head-shaped intermediate has; ``dim0``, ... for any other shape."""
        return _AXES.get(self.shape) or tuple(f"dim{i}" for i in range(len(self.shape)))

    def axes_for(self, ndim: int) -> tuple[str | None, ...]:
        """The axes to localise a tensor of ``ndim`` dims by: the symbols' names, or ``dim0``, ..."""
        return tuple(f"dim{i}" for i in range(ndim)) if self.declared else self.axes

    @property
    def tolerance_of(self) -> str:
        return self.tolerance


def intermediates(op: str, num_layers: int = 0) -> tuple[Intermediate, ...]:
    """Every intermediate of ``op`` in dataflow order, as its pack declares them (``num_layers``:
    the case's layer count, for an op that stacks layers); none for an op that declares none."""
    declared = packs.find(op)
    return declared.intermediates(num_layers) if declared is not None and declared.intermediates else ()


def declared(entries, tolerance: str) -> tuple[Intermediate, ...]:
    """A spec op's intermediates from its case's ``spec["intermediates"]``: ``[name, upstream]``
    pairs in dataflow order (``harness.worker.spec_check`` read them from ``INTERMEDIATES``);
    ``tolerance``: the output whose tolerance they take."""
    return tuple(Intermediate(str(name), (), tuple(up), None, tolerance) for name, up in entries)


def tolerance_output(op: str, item: Intermediate) -> str:
    """The output whose tolerance ``item`` is compared with: the one its pack names for every
    intermediate of the op, else its own nearest output."""
    declared = packs.find(op)
    return (declared.intermediate_tolerance if declared is not None and declared.intermediate_tolerance
            else item.tolerance_of)


def shape_of(item: Intermediate, sizes: Mapping[str, int], rows: int) -> tuple[int, ...]:
    """The concrete shape of ``item`` for a case with these geometry ``sizes``."""
    return tuple(rows if sym == "rows" else resolve_shape((sym,), sizes)[0] for sym in item.shape)


def declares_dump(fn: Callable) -> bool:
    """``fn`` declares a keyword parameter ``dump`` (``**kwargs`` alone does not count): a
    kernel, or a spec op's golden, that dumps its intermediates (docs/intermediates.md)."""
    try:
        p = inspect.signature(fn).parameters.get("dump")
    except (TypeError, ValueError):
        return False
    return p is not None and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
