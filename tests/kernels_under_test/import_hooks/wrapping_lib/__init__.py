"""A type-checking style import hook (typeguard's or beartype's way): a finder first on
``sys.meta_path`` that claims every module the path finder finds and wraps its loader to instrument the
module after it runs.  The file is the same, only the loader differs."""
from __future__ import annotations

import importlib.machinery
import sys

instrumented: list[str] = []


class _Instrumenting:
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        instrumented.append(module.__name__)


class _CheckingFinder:
    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _Instrumenting(spec.loader)
        return spec


if not any(isinstance(f, _CheckingFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _CheckingFinder())
