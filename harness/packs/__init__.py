"""The op packs the harness knows, found once per process (docs/architecture.md, "Op packs").

The packs shipped with the harness, then every pack installed under the entry-point group
``harness.packs`` (``name = "package.module"``, the module holding ``PACK``), then the modules
``HARNESS_PACKS`` names (comma-separated, for a checkout that is not installed).  Loaded on first
use, not at import, so the low modules the packs themselves build on (``ops``, ``case``) can ask
without a circle.  Torch-free.
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from functools import lru_cache
from importlib import metadata

from harness.errors import UsageError
from harness.packs.api import OpEntry, Pack

BUILTIN_PACKS = ("harness.packs.qwen3", "harness.packs.sampling")
ENTRY_POINT_GROUP = "harness.packs"
PACKS_ENV = "HARNESS_PACKS"


class PackError(UsageError):
    """A pack that cannot be loaded, or two that declare the same op, kernel or geometry preset."""


def _modules() -> list[str]:
    names = list(BUILTIN_PACKS)
    try:
        names += [ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)]
    except Exception:       # a broken installed distribution must not stop the harness  # noqa: BLE001
        pass
    names += [n.strip() for n in os.environ.get(PACKS_ENV, "").split(",") if n.strip()]
    return list(dict.fromkeys(names))


def _load(name: str) -> Pack:
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001
        raise PackError(f"op pack {name}: cannot import it: {type(exc).__name__}: {exc}") from exc
    pack = getattr(module, attr or "PACK", None)
    if not isinstance(pack, Pack):
        raise PackError(f"op pack {name}: {attr or 'PACK'} is not a harness.packs.api.Pack")
    return pack


@lru_cache(maxsize=None)
def packs() -> tuple[Pack, ...]:
    loaded = tuple(_load(name) for name in _modules())
    owner: dict[str, str] = {}
    kernels: dict[tuple[str, str], str] = {}
    presets: dict[str, str] = {"tiny": "the harness"}
    for pack in loaded:
        for name in pack.presets:
            if name in presets:
                raise PackError(f"geometry preset {name!r} is declared by two packs: {presets[name]} and {pack.name}")
            presets[name] = pack.name
        for op in pack.ops:
            if op in owner:
                raise PackError(f"op {op!r} is declared by two packs: {owner[op]} and {pack.name}")
            owner[op] = pack.name
        for kernel, table in pack.kernels.items():
            for op in table:
                if (kernel, op) in kernels:
                    raise PackError(f"kernel {kernel!r} on op {op!r} is declared by two packs: "
                                    f"{kernels[kernel, op]} and {pack.name}")
                kernels[kernel, op] = pack.name
    return loaded


@lru_cache(maxsize=None)
def _entries() -> dict[str, tuple[Pack, OpEntry]]:
    return {op: (pack, entry) for pack in packs() for op, entry in pack.ops.items()}


@lru_cache(maxsize=None)
def ops() -> dict[str, OpEntry]:
    """Every op of every pack, by name, in the packs' order."""
    return {op: entry for op, (_, entry) in _entries().items()}


def entry(op: str) -> OpEntry:
    """The declaration of ``op``; KeyError naming the ops there are."""
    try:
        return _entries()[op][1]
    except KeyError:
        raise KeyError(f"no op {op!r} in any pack; known: {', '.join(_entries())}") from None


def find(op: str) -> OpEntry | None:
    found = _entries().get(op)
    return found[1] if found else None


def pack_of(op: str) -> Pack:
    try:
        return _entries()[op][0]
    except KeyError:
        raise KeyError(f"no op {op!r} in any pack; known: {', '.join(_entries())}") from None


@lru_cache(maxsize=None)
def kernels() -> dict[str, dict[str, str]]:
    """Every builtin kernel name -> {op -> "module:callable"}, the packs' tables merged."""
    out: dict[str, dict[str, str]] = {}
    for pack in packs():
        for kernel, table in pack.kernels.items():
            out.setdefault(kernel, {}).update(table)
    return out


@lru_cache(maxsize=None)
def contracts() -> dict:
    """Every op's contract (``OpSpec``) by name."""
    return {name: e.contract for name, e in ops().items()}


@lru_cache(maxsize=None)
def presets() -> dict:
    """Every pack's geometry presets by name."""
    return {name: geo for pack in packs() for name, geo in pack.presets.items()}


class PackView(Mapping):
    """A read-only table built from the packs on first access, not at import: how the low modules
    (``harness.ops.OPS``, ``harness.ops.registry.BUILTINS``, ``harness.case.PRESETS``) offer what the
    packs declare while the packs themselves are written with those modules."""

    def __init__(self, table: Callable[[], Mapping]) -> None:
        self._table = table

    def __getitem__(self, key):
        return self._table()[key]

    def __iter__(self):
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())

    def __repr__(self) -> str:
        return f"PackView({dict(self._table())!r})"


def resolve(path: str):
    """The object a worker-side import path names: ``module:attribute``, or ``module`` itself."""
    module_name, _, attr = path.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


__all__ = ["BUILTIN_PACKS", "ENTRY_POINT_GROUP", "OpEntry", "PACKS_ENV", "Pack", "PackError", "PackView", "contracts",
           "entry", "find", "kernels", "ops", "pack_of", "packs", "presets", "resolve"]
