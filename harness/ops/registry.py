"""Builtin kernels by name: the implementations under test that ship with the packs (harness/packs/).

A registry of import paths, pure data: the front end validates kernel names
without importing torch; the device worker imports the callable.
A case names a builtin here, or any ``package.module:callable`` on the
worker's PYTHONPATH.  ``--kernel`` also takes a module, ``package.module``,
that holds one function per op, named like the op.
"""
from __future__ import annotations

from collections.abc import Mapping

from harness import packs
from harness.packs import PackView


# name -> {op -> "module:callable"}: every pack's builtin kernels (``Pack.kernels``), merged
BUILTINS: Mapping[str, Mapping[str, str]] = PackView(packs.kernels)


def is_import_path(kernel: str) -> bool:
    module, sep, attr = kernel.partition(":")
    return bool(sep) and is_module_path(module) and attr.isidentifier()


def is_module_path(kernel: str) -> bool:
    """``package.module``: a kernel module with one function per op, named like the op."""
    return all(part.isidentifier() for part in kernel.split("."))


def is_kernel_name(kernel: str) -> bool:
    """What ``--kernel`` takes: a builtin name, ``package.module:callable`` or ``package.module``."""
    return kernel in BUILTINS or is_import_path(kernel) or is_module_path(kernel)


def target(kernel: str, op: str) -> str:
    """The ``module:callable`` to import for ``kernel`` on ``op``; KeyError if it has none.

    A builtin maps each op it implements; ``module:callable`` is that callable for
    every op; a module (``--kernel`` only) gives its function named like the op.
    """
    if kernel in BUILTINS:
        return BUILTINS[kernel][op]
    if is_import_path(kernel):
        return kernel
    if is_module_path(kernel):
        return f"{kernel}:{op}"
    raise KeyError(kernel)
