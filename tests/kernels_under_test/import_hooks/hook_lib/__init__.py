"""A library that serves modules from an in-memory bundle: a path hook put first on ``sys.path_hooks``
for its own ``<bundle:...>`` entries, one such entry appended to ``sys.path``, and the importer cache
cleared (what the import system's documentation asks after adding a hook)."""
from __future__ import annotations

import importlib.util
import sys

ENTRY = "<bundle:hook_lib>"
_SOURCES = {"hook_lib_bundled": "SCALE = 1.0\n"}


class _BundleFinder:
    def find_spec(self, name, target=None):
        if name in _SOURCES:
            return importlib.util.spec_from_loader(name, _BundleLoader())
        return None

    def invalidate_caches(self):
        pass


class _BundleLoader:
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(_SOURCES[module.__name__], module.__dict__)


def _hook(path):
    if path == ENTRY:
        return _BundleFinder()
    raise ImportError("not a bundle")


if _hook not in sys.path_hooks:
    sys.path_hooks.insert(0, _hook)
    sys.path.append(ENTRY)
    sys.path_importer_cache.clear()
