"""An op's contract as data: the kernel ABI (docs/contracts.md).

Each op lists its kernel arguments by role; the ops themselves are declared by packs
(harness/packs/), ``OPS`` is every pack's by name.  Shapes are written in geometry
symbols (``Hq*D`` a product, ``B+1`` a sum) and resolved with the sizes of
``harness.case.shape_sizes``; nothing here imports torch, so the front end can
validate case files and print the contracts without it.

Roles:
  input    read-only, generated from the seed
  cache    in/out paged KV cache, canary-filled, guard-banded, checked by slot mapping
  output   preallocated by the harness, poisoned, guard-banded, compared with the golden
  scalar   a Python float or int

A spec op (docs/specs.md) is the same ``OpSpec``, built by ``spec_op`` from the table a
user's TensorSpec module gave (``Case.spec["args"]``): its tensors are inputs or outputs,
its ``ScalarSpec``s scalars, each shape in numbers, each dim named (``dim0``... unless the
spec names them).  The generic code (launch, checks, digest, memory plan) reads either.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from harness import packs
from harness.packs import PackView


@dataclass(frozen=True)
class Arg:
    name: str
    role: str                 # input | cache | output | scalar
    shape: tuple[str, ...] = ()
    dtype: str = "float32"    # float32 | bfloat16 | int32 | float | int
    axes: tuple[str | None, ...] = ()  # per dim: name to localise a mismatch by, or None


@dataclass(frozen=True)
class OpSpec:
    name: str
    args: tuple[Arg, ...]
    writes_cache: bool
    # Outputs whose rows with slot < 0 are not compared (warmup/padding rows).
    slot_masked_outputs: tuple[str, ...] = ()
    # A spec op's kernel may also return its outputs as a dict by name (docs/specs.md).
    returns_by_name: bool = False

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)

    def by_role(self, role: str) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role == role)

    @property
    def outputs(self) -> tuple[Arg, ...]:
        return self.by_role("output")

    @property
    def caches(self) -> tuple[Arg, ...]:
        return self.by_role("cache")

    def arg(self, name: str) -> Arg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)


def resolve_dim(sym: str, sizes: Mapping[str, int]) -> int | None:
    """One shape symbol in numbers; None when ``sizes`` lacks a symbol it needs. Nothing is evaluated."""
    if "*" in sym:
        factors = [sizes.get(s) for s in sym.split("*")]
        return None if None in factors else math.prod(factors)
    if "+" in sym:
        name, extra = sym.split("+")
        return None if name not in sizes else sizes[name] + int(extra)
    if sym.isdigit():
        return int(sym)
    return sizes.get(sym)


def resolve_shape(shape: tuple[str, ...], sizes: Mapping[str, int]) -> tuple[int, ...]:
    """A shape in numbers; KeyError naming the first symbol ``sizes`` cannot resolve."""
    dims = tuple(resolve_dim(sym, sizes) for sym in shape)
    for sym, dim in zip(shape, dims):
        if dim is None:
            raise KeyError(sym)
    return dims


# op name -> contract, for every op of every pack (harness/packs/; the Qwen3 ops' in
# harness/packs/qwen3/contracts.py)
OPS: Mapping[str, OpSpec] = PackView(packs.contracts)


def spec_op(spec: Mapping) -> OpSpec:
    """The ``OpSpec`` of a spec op from its case's ``spec`` wire form (``Case.spec``): every entry of
    ``spec["args"]`` in the module's order, ``{"name", "role", "shape", "dtype", "dims"}`` with
    ``role`` one of input, output, scalar (torch dtype names: ``bfloat16``, ``int8``, ...)."""
    args = []
    for entry in spec["args"]:
        shape = tuple(str(int(n)) for n in entry.get("shape") or ())
        dims = entry.get("dims") or [f"dim{i}" for i in range(len(shape))]
        args.append(Arg(entry["name"], entry["role"], shape, entry["dtype"], tuple(dims)))
    return OpSpec(spec["op"], tuple(args), writes_cache=False, returns_by_name=True)
