"""The import machinery a kernel can change for every later case in the warm worker.

A later case imports its kernel (a mutant control, the user's own module) through the import
system, so a kernel that bends it decides what the next case runs: a ``sys.meta_path`` finder
that serves the reference for ``harness.kernels.mutants.*`` turns every mutant control into a
PASS.  Libraries change the same machinery for their own ends when first imported (an editable
install's finder, ``six``'s meta importer, lazy loaders, ``typeguard``/``beartype`` and pytest's
assertion rewriting put a finder at ``sys.meta_path[0]``; some add a path hook or a
``sys.path`` entry), and an innocent kernel that imports one must not be blamed.  So a change is
judged by what it does, not by where it sits (issue 37, item 2):

- ``sys.meta_path``, ``sys.path_hooks``, ``sys.path`` and ``sys.path_importer_cache`` are read at
  each snapshot; when any of them differs (an importer cache entry that is not the import system's
  own finder for its own path: ``FileFinder``, ``zipimporter``, ``None`` for what is no folder),
  every *module that matters* is looked up twice without importing anything: with the machinery
  as it is now, and as it was before the window (its finders and hooks, its ``sys.path``, a fresh
  importer cache).  The modules that matter are the harness's own (every module file of the
  ``harness`` packages: the builtin kernels and mutant controls among them) and every module
  under the workers' kernel paths (``PYTHONPATH``: the user's kernels and mutant controls).  A
  module found at another file (``__spec__.origin``, real paths compared), or no longer found, is
  a finding naming the change that did it; a finder that only serves its own names, or serves the
  same files through another loader (type-checking and rewriting hooks), is none.  The verdict is
  kept per set of changed objects, so a library's finder left in place costs the probe once;
- ``sys.modules`` entries added for names that were not imported before (replaced and removed
  ones are ``hygiene``'s namespace check): a kernel importing its own modules is normal, so an
  added entry is a finding only when it is not what the import system would load under that
  name: a module whose file differs from what the machinery before the window finds for the name,
  or a name of the harness's (``harness.*``) that it does not find at all.  This is the safety
  net for a change whose lookups looked right (a finder that answers differently when the
  harness itself imports): whatever it serves is judged when it is imported.  Each module is
  judged once per worker.

What is not seen: a loader that keeps a module's file but runs other code (the type-checking hooks
above do exactly that, legitimately); docs/architecture.md ("Trust model").
"""
from __future__ import annotations

import importlib.machinery
import os
import sys
import zipimport
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

_MAX_NAMED = 5
_MAX_PROBED = 2000          # modules that matter looked up; a kernel path holding more is cut (the safety net stays)


@dataclass(frozen=True)
class ImportState:
    meta_path: tuple[Any, ...]
    path_hooks: tuple[Any, ...]
    path: tuple[Any, ...]                 # sys.path
    importer_cache: dict[str, Any]


def read() -> ImportState:
    return ImportState(tuple(sys.meta_path), tuple(sys.path_hooks), tuple(sys.path), dict(sys.path_importer_cache))


def _name(obj: Any) -> str:
    kind = obj if isinstance(obj, type) else type(obj)
    if getattr(obj, "__qualname__", None) and callable(obj) and not isinstance(obj, type):
        kind = obj
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', kind.__name__)}"


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _plain_entry(path: Any, finder: Any) -> bool:
    """Whether ``finder`` is what the import system's own hooks make of ``path``: a ``FileFinder`` of
    that folder, a ``zipimporter`` of that archive, ``None`` for what is no folder."""
    try:
        if finder is None:
            return not (isinstance(path, str) and os.path.isdir(path))
        if type(finder) is importlib.machinery.FileFinder:
            return os.path.abspath(path or ".") == os.path.abspath(finder.path)
        if type(finder) is zipimport.zipimporter:
            return os.path.abspath(path).startswith(os.path.abspath(finder.archive))
    except (OSError, TypeError, ValueError, AttributeError):
        pass
    return False


def _changed_entries(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any]]:
    """Importer cache entries added or replaced since ``before`` that are not the import system's own
    finder for their path; removed ones are rebuilt by the import system (``invalidate_caches``)."""
    # identity without id(): id() raises an audit event, and the worker's audit hook (hooks.py) is a
    # Python call per event: 2 x 336 entries a snapshot on this machine, 0.5-1 ms a case
    if len(before) == len(after) and list(before) == list(after) and \
            all(b is a for b, a in zip(before.values(), after.values())):
        return []
    return [(path, finder) for path, finder in after.items()
            if before.get(path, _GONE) is not finder and not _plain_entry(path, finder)]


_GONE = object()


# -- resolving a name without importing it ----------------------------------------------------------

@dataclass(frozen=True)
class Machinery:
    """One set of finders, hooks, search path and importer cache to look names up with."""

    meta_path: tuple[Any, ...]
    path_hooks: tuple[Any, ...]
    path: tuple[Any, ...]
    importer_cache: dict[str, Any]


def now(state: ImportState) -> Machinery:
    """The machinery as ``state`` read it, its importer cache copied (a lookup fills it)."""
    return Machinery(state.meta_path, state.path_hooks, state.path, dict(state.importer_cache))


def plain(state: ImportState) -> Machinery:
    """The machinery as ``state`` read it with a fresh importer cache: what its hooks make of each
    folder, whatever entries were put in the cache by hand."""
    return Machinery(state.meta_path, state.path_hooks, state.path, {})


@contextmanager
def _bound(m: Machinery) -> Iterator[None]:
    """``sys.path``, ``sys.path_hooks`` and ``sys.path_importer_cache`` set to ``m``'s for the lookups
    (``PathFinder`` reads them from ``sys`` at each call), then put back."""
    saved = sys.path, sys.path_hooks, sys.path_importer_cache
    sys.path, sys.path_hooks, sys.path_importer_cache = list(m.path), list(m.path_hooks), m.importer_cache
    try:
        yield
    finally:
        sys.path, sys.path_hooks, sys.path_importer_cache = saved


class _Raised:
    def __init__(self, exc: BaseException) -> None:
        self.origin = f"a lookup that raises {type(exc).__name__}"
        self.has_location = False
        self.submodule_search_locations = None


class Lookup:
    """Finds specs under one ``Machinery`` (bind it with ``_bound`` first); a parent not imported is
    looked up the same way, without importing it.  Remembers what it found."""

    def __init__(self, machinery: Machinery) -> None:
        self.m = machinery
        self._found: dict[str, Any] = {}

    def spec(self, name: str) -> Any:
        if name not in self._found:
            self._found[name] = self._spec(name)
        return self._found[name]

    def _spec(self, name: str) -> Any:
        parent, _, _ = name.rpartition(".")
        path = None
        if parent:
            module = sys.modules.get(parent)
            if module is not None:
                path = getattr(module, "__path__", None)
            else:
                spec = self.spec(parent)
                path = None if spec is None or isinstance(spec, _Raised) else spec.submodule_search_locations
            if path is None:
                return None
        try:
            for finder in self.m.meta_path:
                find_spec = getattr(finder, "find_spec", None)
                spec = find_spec(name, None if path is None else list(path)) if find_spec else None
                if spec is not None:
                    return spec
        except Exception as exc:     # a finder that raises, a parent whose __path__ is not a list of strings
            return _Raised(exc)
        return None


def _origin_of(spec: Any) -> str | None:
    return getattr(spec, "origin", None) if spec is not None else None


def _same_file(a: str, b: str) -> bool:
    try:
        return a == b or os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError, TypeError):
        return False


def _differs(expected: Any, found: Any) -> str | None:
    """Why ``found`` is not ``expected`` (the spec of a module that exists on disk); None when it is."""
    if isinstance(expected, _Raised) or _origin_of(expected) in (None, "built-in", "frozen") \
            or not getattr(expected, "has_location", False):
        return None           # nothing on disk to compare with (a namespace package, a builtin)
    origin = _origin_of(found)
    if isinstance(origin, str) and _same_file(origin, expected.origin):
        return None
    return f"{origin or 'not found'} (the import system's: {expected.origin})"


# -- the modules that matter --------------------------------------------------------------------------

_matter: list[tuple[str, ...]] = []      # computed once per process


def _suffixes() -> tuple[str, ...]:
    return tuple(sorted(importlib.machinery.all_suffixes(), key=len, reverse=True))


def _modules_in(folder: str, prefix: str, out: dict[str, None], todo: list[tuple[str, str]]) -> None:
    suffixes = _suffixes()
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        name = entry.name
        try:
            if entry.is_dir():
                if name.isidentifier() and os.path.exists(os.path.join(entry.path, "__init__.py")):
                    out.setdefault(prefix + name)
                    todo.append((entry.path, prefix + name + "."))
                continue
        except OSError:
            continue
        suffix = next((s for s in suffixes if name.endswith(s)), None)
        stem = name[:-len(suffix)] if suffix else ""
        if stem.isidentifier() and stem != "__init__":
            out.setdefault(prefix + stem)


def names_that_matter() -> tuple[str, ...]:
    """The harness's own modules (every package ``harness.*`` imported so far, walked on disk) and the
    modules under the kernel paths (``PYTHONPATH``), at most ``_MAX_PROBED``; computed once."""
    if _matter:
        return _matter[0]
    out: dict[str, None] = {"harness": None}
    todo: list[tuple[str, str]] = []
    for name, module in sorted(sys.modules.items()):
        if (name == "harness" or name.startswith("harness.")) and hasattr(module, "__path__"):
            out.setdefault(name)
            todo += [(folder, name + ".") for folder in list(module.__path__) if isinstance(folder, str)]
    todo += [(os.path.abspath(p), "") for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    seen = set()
    while todo and len(out) < _MAX_PROBED:
        folder, prefix = todo.pop(0)
        if (folder, prefix) not in seen:
            seen.add((folder, prefix))
            _modules_in(folder, prefix, out, todo)
    _matter.append(tuple(out)[:_MAX_PROBED])
    return _matter[0]


# -- judging a change ---------------------------------------------------------------------------------

_verdicts: dict[tuple, tuple[list[str], tuple]] = {}     # key -> (findings, the objects keyed, kept alive)
_MAX_VERDICTS = 64


def _key(before: ImportState, after: ImportState, entries: list[tuple[str, Any]]) -> tuple[tuple, tuple]:
    objects = (*before.meta_path, *after.meta_path, *before.path_hooks, *after.path_hooks,
               *(f for _, f in entries))
    key = (tuple(map(id, before.meta_path)), tuple(map(id, after.meta_path)), tuple(map(id, before.path_hooks)),
           tuple(map(id, after.path_hooks)), before.path, after.path,
           tuple((p, id(f)) for p, f in entries))
    return key, objects


def changes(before: ImportState, after: ImportState) -> list[str]:
    """What the machinery's change does to the modules that matter (empty: nothing, or no change)."""
    entries = _changed_entries(before.importer_cache, after.importer_cache)
    if _same(before.meta_path, after.meta_path) and _same(before.path_hooks, after.path_hooks) \
            and before.path == after.path and not entries:
        return []
    try:
        key, objects = _key(before, after, entries)
        hash(key)
    except TypeError:           # a sys.path entry that is not hashable: judged each time
        return _judge(before, after, entries)
    if key not in _verdicts:
        if len(_verdicts) >= _MAX_VERDICTS:
            _verdicts.clear()
        _verdicts[key] = (_judge(before, after, entries), objects)
    return list(_verdicts[key][0])


def _lookups(machinery: Machinery, names: tuple[str, ...]) -> dict[str, Any]:
    lookup = Lookup(machinery)
    with _bound(machinery):
        return {name: lookup.spec(name) for name in names}


def _moved(names: tuple[str, ...], expected: dict[str, Any], found: dict[str, Any]) -> dict[str, str]:
    return {name: why for name in names if (why := _differs(expected[name], found[name]))}


def _judge(before: ImportState, after: ImportState, entries: list[tuple[str, Any]]) -> list[str]:
    names = names_that_matter()
    expected = _lookups(plain(before), names)
    moved = _moved(names, expected, _lookups(now(after), names))
    if not moved:
        return []
    # which change did it: each one alone on top of the machinery before the window
    out = []
    suspects = [
        ("sys.meta_path", not _same(before.meta_path, after.meta_path),
         lambda: Machinery(after.meta_path, before.path_hooks, before.path, {}),
         lambda: _listing(before.meta_path, after.meta_path, "finders")),
        ("sys.path_hooks", not _same(before.path_hooks, after.path_hooks),
         lambda: Machinery(before.meta_path, after.path_hooks, before.path, {}),
         lambda: _listing(before.path_hooks, after.path_hooks, "hooks")),
        ("sys.path", before.path != after.path,
         lambda: Machinery(before.meta_path, before.path_hooks, after.path, {}),
         lambda: _path_listing(before.path, after.path)),
        ("sys.path_importer_cache", bool(entries),
         lambda: Machinery(before.meta_path, before.path_hooks, before.path,
                           {**before.importer_cache, **dict(entries)}),
         lambda: ", ".join(f"{p!r} → {_name(f)}" for p, f in entries[:_MAX_NAMED])
         + (f", and {len(entries) - _MAX_NAMED} more" if len(entries) > _MAX_NAMED else "")),
    ]
    for what, changed, machinery, listing in suspects:
        if not changed:
            continue
        alone = _moved(tuple(moved), expected, _lookups(machinery(), tuple(moved)))
        if alone:
            out.append(f"{what}: {listing()}, and later imports load other files: {_serving(alone)}")
    if not out:       # only together (a hook and a cache entry removed): named together
        out.append("the import machinery (" + ", ".join(w for w, changed, _, _ in suspects if changed)
                   + f") changed, and later imports load other files: {_serving(moved)}")
    return out


def _serving(moved: dict[str, str]) -> str:
    items = sorted(moved.items())
    return "; ".join(f"{name!r} → {why}" for name, why in items[:_MAX_NAMED]) + \
        (f"; and {len(items) - _MAX_NAMED} more" if len(items) > _MAX_NAMED else "")


def _listing(before: tuple[Any, ...], after: tuple[Any, ...], kind: str) -> str:
    """The finders (hooks) added, where, and the ones removed; "reordered" when only the order changed."""
    parts = []
    for i, f in enumerate(after):
        if not any(f is b for b in before):
            ahead = any(any(b is a for b in before) for a in after[i + 1:])
            parts.append(f"{_name(f)} added {'ahead of' if ahead else 'after'} the import system's {kind}")
    parts += [f"{_name(f)} removed" for f in before if not any(f is a for a in after)]
    return ", ".join(parts) if parts else "reordered"


def _path_listing(before: tuple[Any, ...], after: tuple[Any, ...]) -> str:
    added = [p for p in after if p not in before]
    removed = [p for p in before if p not in after]
    parts = [f"{p!r} added" for p in added[:_MAX_NAMED]] + [f"{p!r} removed" for p in removed[:_MAX_NAMED]]
    return ", ".join(parts) if parts else "reordered"


def restore(before: ImportState, after: ImportState) -> None:
    """Put the machinery back as ``before`` had it when its change moved a module that matters (the
    worker is replaced then); a change that moved none stays (a library's finder is its own)."""
    if not changes(before, after):
        return
    sys.meta_path[:] = list(before.meta_path)
    sys.path_hooks[:] = list(before.path_hooks)
    sys.path[:] = list(before.path)
    for path, _ in _changed_entries(before.importer_cache, dict(sys.path_importer_cache)):
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


def _loadable_as(name: str, origin: str, search_path: list[Any]) -> bool:
    """Whether ``origin`` is a file the import system loads under ``name`` from some entry of the
    search path (``sys.path``, or the parent package's ``__path__``), if not the first: a package
    that gives way to another of its name further along ``sys.path`` (``harness.bare_names``)."""
    try:
        stem = origin
        if os.path.basename(stem).startswith("__init__."):
            stem = os.path.dirname(stem)
        else:
            suffix = next((s for s in _suffixes() if stem.endswith(s)), None)
            if suffix is None:
                return False
            stem = stem[:-len(suffix)]
        parent, _, last = name.rpartition(".")
        if os.path.basename(stem) != last:
            return False
        roots = search_path if not parent else list(getattr(sys.modules.get(parent), "__path__", None) or [])
        folder = os.path.realpath(os.path.dirname(stem))
        return any(os.path.realpath(root or os.getcwd()) == folder for root in roots if isinstance(root, str))
    except (OSError, ValueError, TypeError):
        return False


def impostor(name: str, module: Any, lookup: Lookup, search_path: list[Any]) -> str | None:
    """Why the ``sys.modules`` entry ``name`` is not what the import system would load; None when it
    is.  ``lookup``: the ``trusted`` machinery, bound; ``search_path``: ``sys.path`` now."""
    if _judged.get(name) == id(module):
        return None
    ours = name == "harness" or name.startswith("harness.")
    expected = lookup.spec(name)
    origin = _origin(module)
    if isinstance(expected, _Raised):
        expected = None
    if expected is None or not expected.origin or expected.origin in ("built-in", "frozen") or not expected.has_location:
        if ours and expected is None:
            return f"sys.modules[{name!r}] added: a module of the harness's that the import system does not find"
        _judged[name] = id(module)
        return None
    if origin is None or not (_same_file(origin, expected.origin) or _loadable_as(name, origin, search_path)):
        return (f"sys.modules[{name!r}] added: {origin or 'no file'}, where the import system finds "
                f"{expected.origin}")
    _judged[name] = id(module)
    return None


# The worker's machinery at start (``set_baseline``): what an added module is judged against.
_baseline: list[ImportState] = []


def set_baseline(state: ImportState) -> None:
    _baseline[:] = [state]


def trusted(before: ImportState) -> Machinery:
    """The finders and hooks the worker started with (``set_baseline``; ``before``'s without one), the
    search path as it was before the window, a fresh importer cache.  A finder a kernel added, even
    one whose lookups looked right, is not asked: it is what is judged."""
    base = _baseline[0] if _baseline else before
    return Machinery(base.meta_path, base.path_hooks, before.path, {})


def added_modules(names: list[str], modules: dict[str, Any], before: ImportState) -> list[tuple[str, str]]:
    """(name, why) for each of ``names`` (entries added to ``sys.modules``) that is an impostor,
    judged against the ``trusted`` machinery."""
    todo = [(name, modules[name]) for name in names
            if modules.get(name) is not None and _judged.get(name) != id(modules[name])]
    if not todo:          # a failed import's placeholder, removed since, or judged already
        return []
    search_path = list(sys.path)
    machinery = trusted(before)
    lookup = Lookup(machinery)
    out = []
    with _bound(machinery):
        for name, module in todo:
            why = impostor(name, module, lookup, search_path)
            if why:
                out.append((name, why))
    return out
