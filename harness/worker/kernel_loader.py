"""Importing the kernel a case names, once per worker process (``KernelLoader``).

A module of its own so that ``hygiene`` can watch it without importing ``execute`` (which imports
``hygiene``): a kernel that rebinds ``KernelLoader.load`` serves its own choice to every later case
of the warm worker, mutant controls included, so the class is one of the namespaces a kernel may
not change (``harness.worker.hygiene.NAMESPACES``).
"""
from __future__ import annotations

import importlib
from typing import Callable

from harness.provenance import kernel_origin
from harness.ops.registry import target as kernel_target


class KernelLoader:
    """Imports ``module:callable`` once per process."""

    def __init__(self) -> None:
        self._loaded: dict[str, Callable] = {}
        self.origins: dict[str, dict] = {}

    def load(self, kernel: str, op: str) -> Callable:
        target = kernel_target(kernel, op)
        if target not in self._loaded:
            module_name, _, attr = target.partition(":")
            module = importlib.import_module(module_name)
            fn = getattr(module, attr, None)
            if fn is None or not callable(fn):
                raise ImportError(f"{module_name} has no callable {attr!r}")
            self._loaded[target] = fn
            self.origins[target] = {"target": target, **kernel_origin(getattr(module, "__file__", None))}
        return self._loaded[target]

    def origin(self, kernel: str, op: str) -> dict:
        return self.origins.get(kernel_target(kernel, op), {})
