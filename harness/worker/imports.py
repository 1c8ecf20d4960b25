"""The import machinery a kernel can change for every later case in the warm worker.

A later case imports its kernel (a mutant control, the user's own module) through the import
system, so a kernel that bends it decides what the next case runs: a ``sys.meta_path`` finder
that serves the reference for ``harness.kernels.mutants.*`` turns every mutant control into a
PASS.  What ``hygiene`` watches here (issue 37, item 2):

- ``sys.meta_path`` and ``sys.path_hooks``: a finder or hook added ahead of those already there,
  one removed, or the order changed (put back).  One appended after them is allowed: it is asked
  only for names no earlier one finds, so it cannot shadow a module that exists (six and
  transformers append alias finders when imported);
- ``sys.path_importer_cache``: an entry added or replaced by a finder that is not the import
  system's own (``FileFinder``, ``zipimporter``); entries removed are rebuilt by the import system
  (``importlib.invalidate_caches`` drops some) and are no finding;
- ``sys.modules`` entries added for names that were not imported before (replaced and removed
  ones are ``hygiene``'s namespace check): a kernel importing its own modules is normal, so an
  added entry is a finding only when it is not what the import system would load under that
  name: a module whose file (``__spec__.origin`` or ``__file__``) differs from what the finders of
  ``sys.meta_path`` as it was before the window find for the name, or a name of the harness's
  (``harness.*``) they do not find at all.  Each module is judged once per worker.
"""
from __future__ import annotations

import importlib.machinery
import os
import sys
from dataclasses import dataclass
from typing import Any

_OWN_FINDER_MODULES = frozenset({"importlib._bootstrap_external", "_frozen_importlib_external", "zipimport",
                                 "importlib._bootstrap", "_frozen_importlib"})
_MAX_NAMED = 5


@dataclass(frozen=True)
class ImportState:
    meta_path: tuple[Any, ...]
    path_hooks: tuple[Any, ...]
    importer_cache: dict[str, Any]


def read() -> ImportState:
    return ImportState(tuple(sys.meta_path), tuple(sys.path_hooks), dict(sys.path_importer_cache))


def _name(obj: Any) -> str:
    kind = obj if isinstance(obj, type) else type(obj)
    if getattr(obj, "__qualname__", None) and callable(obj) and not isinstance(obj, type):
        kind = obj
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', kind.__name__)}"


def _own_finder(finder: Any) -> bool:
    return finder is None or type(finder).__module__ in _OWN_FINDER_MODULES


def _appended(before: tuple[Any, ...], after: tuple[Any, ...]) -> bool:
    """``after`` is ``before`` with entries added at its end (or unchanged)."""
    return len(after) >= len(before) and all(a is b for a, b in zip(before, after))


def _listing(what: str, before: tuple[Any, ...], after: tuple[Any, ...]) -> list[str]:
    """A finder (hook) added ahead of those already there, one removed, or the order changed.  One
    appended after them is allowed: it is asked only for names no earlier one finds, so it cannot
    shadow a module that exists (six and transformers append alias finders when imported)."""
    if _appended(before, after):
        return []
    added = [f for f in after if not any(f is b for b in before)]
    removed = [f for f in before if not any(f is a for a in after)]
    parts = [f"{_name(f)} added ahead of the import system's finders" for f in added] + \
            [f"{_name(f)} removed" for f in removed]
    return [f"{what}: " + (", ".join(parts) if parts else "reordered")]


def changes(before: ImportState, after: ImportState) -> list[str]:
    out = _listing("sys.meta_path", before.meta_path, after.meta_path)
    out += _listing("sys.path_hooks", before.path_hooks, after.path_hooks)
    if before.importer_cache != after.importer_cache:
        foreign = [(path, finder) for path, finder in after.importer_cache.items()
                   if before.importer_cache.get(path, _GONE) is not finder and not _own_finder(finder)]
        if foreign:
            out.append("sys.path_importer_cache: " + ", ".join(
                f"{path!r} → {_name(f)}" for path, f in foreign[:_MAX_NAMED])
                + (f", and {len(foreign) - _MAX_NAMED} more" if len(foreign) > _MAX_NAMED else ""))
    return out


_GONE = object()


def restore(before: ImportState, after: ImportState) -> None:
    if not _appended(before.meta_path, after.meta_path):
        sys.meta_path[:] = list(before.meta_path)
    if not _appended(before.path_hooks, after.path_hooks):
        sys.path_hooks[:] = list(before.path_hooks)
    for path, finder in list(sys.path_importer_cache.items()):
        if before.importer_cache.get(path, _GONE) is not finder and not _own_finder(finder):
            if path in before.importer_cache:
                sys.path_importer_cache[path] = before.importer_cache[path]
            else:
                del sys.path_importer_cache[path]


# -- sys.modules entries added ---------------------------------------------------------------------

# name -> id of the module judged genuine (a later replacement is the namespace check's finding)
_judged: dict[str, int] = {}


def _origin(module: Any) -> str | None:
    try:
        spec = getattr(module, "__spec__", None)
        origin = getattr(spec, "origin", None) if spec is not None else None
        return origin or getattr(module, "__file__", None)
    except Exception:          # an object whose attributes raise: it has no file we can name
        return None


def _found(name: str, finders: tuple[Any, ...]) -> Any:
    """The spec ``finders`` (``sys.meta_path`` as it was before the window) find for ``name``; a parent
    not imported yet is looked up the same way, without importing it."""
    parent, _, _ = name.rpartition(".")
    try:
        if not parent:
            path = None
        elif parent in sys.modules:
            path = getattr(sys.modules[parent], "__path__", None)
        else:
            spec = _found(parent, finders)
            path = spec.submodule_search_locations if spec is not None else None
        if parent and path is None:
            return None
        for finder in finders:
            find_spec = getattr(finder, "find_spec", None)
            spec = find_spec(name, None if path is None else list(path)) if find_spec else None
            if spec is not None:
                return spec
    except Exception:          # a finder that raises, a parent whose __path__ is not a list of strings
        return None
    return None


def _same_file(a: str, b: str) -> bool:
    try:
        return a == b or os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError, TypeError):
        return False


def _loadable_as(name: str, origin: str) -> bool:
    """Whether ``origin`` is a file the import system loads under ``name`` from some entry of the
    search path (``sys.path``, or the parent package's ``__path__``), if not the first: a package
    that gives way to another of its name further along ``sys.path`` (``harness.bare_names``)."""
    try:
        stem = origin
        if os.path.basename(stem).startswith("__init__."):
            stem = os.path.dirname(stem)
        else:
            suffix = next((s for s in sorted(importlib.machinery.all_suffixes(), key=len, reverse=True)
                           if stem.endswith(s)), None)
            if suffix is None:
                return False
            stem = stem[:-len(suffix)]
        parent, _, last = name.rpartition(".")
        if os.path.basename(stem) != last:
            return False
        roots = sys.path if not parent else list(getattr(sys.modules.get(parent), "__path__", None) or [])
        folder = os.path.realpath(os.path.dirname(stem))
        return any(os.path.realpath(root or os.getcwd()) == folder for root in roots if isinstance(root, str))
    except (OSError, ValueError, TypeError):
        return False


def impostor(name: str, module: Any, finders: tuple[Any, ...]) -> str | None:
    """Why the ``sys.modules`` entry ``name`` is not what the import system would load; None when it is."""
    if _judged.get(name) == id(module):
        return None
    ours = name == "harness" or name.startswith("harness.")
    expected = _found(name, finders)
    origin = _origin(module)
    if expected is None or not expected.origin or expected.origin in ("built-in", "frozen") or not expected.has_location:
        if ours and expected is None:
            return f"sys.modules[{name!r}] added: a module of the harness's that the import system does not find"
        _judged[name] = id(module)
        return None
    if origin is None or not (_same_file(origin, expected.origin) or _loadable_as(name, origin)):
        return (f"sys.modules[{name!r}] added: {origin or 'no file'}, where the import system finds "
                f"{expected.origin}")
    _judged[name] = id(module)
    return None


def added_modules(names: list[str], modules: dict[str, Any], finders: tuple[Any, ...]) -> list[tuple[str, str]]:
    """(name, why) for each of ``names`` (entries added to ``sys.modules``) that is an impostor."""
    out = []
    for name in names:
        module = modules.get(name)
        if module is None:           # a failed import's placeholder, or removed since
            continue
        why = impostor(name, module, finders)
        if why:
            out.append((name, why))
    return out
