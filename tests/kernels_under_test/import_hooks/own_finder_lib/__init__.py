"""A library that generates its ``own_finder_lib.tables.*`` modules on import through a finder it puts
first on ``sys.meta_path`` (as lazy loaders and editable installs do); it answers nothing else."""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys

PREFIX = __name__ + ".tables"


class _TablesFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == PREFIX or name.startswith(PREFIX + "."):
            return importlib.util.spec_from_loader(name, self, is_package=name == PREFIX)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.SCALE = 1.0
        if module.__name__ == PREFIX:
            module.__path__ = []


if not any(isinstance(f, _TablesFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _TablesFinder())
