"""The checkout's ``kernels/`` and ``goldens/`` folders are ours only as ``harness.kernels`` and
``harness.goldens`` (their installed names).

Wherever the checkout's root is on ``sys.path`` — ``python -m pytest`` or ``python -m harness``
run from it, a worker started with ``-m`` there — the bare names would find those folders first
and shadow whatever else is called so: transformers 5 imports the PyPI distribution ``kernels``,
and a user's kernel library may have a ``kernels`` or ``goldens`` package of its own.  So each
folder's ``__init__`` calls ``give_way`` when it is imported under its bare name: the import is
answered by what the rest of ``sys.path`` holds under that name, or fails as if our folder were
not there.  (Python returns whatever module stands in ``sys.modules`` under the name when the
package's ``__init__`` finishes, so replacing ourselves there is the import system's own rule.)
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys


def give_way(name: str, init_file: str) -> None:
    """``name`` (a bare top-level name) imported from our folder whose ``__init__`` is ``init_file``:
    load the module the rest of ``sys.path`` provides under ``name`` in its place, or raise
    ``ModuleNotFoundError`` as if our folder did not exist."""
    ours = _real(os.path.dirname(os.path.dirname(os.path.abspath(init_file))))
    others = [p for p in sys.path if isinstance(p, str) and _real(p) != ours]
    spec = importlib.machinery.PathFinder.find_spec(name, others)
    if spec is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        if spec.loader is not None:
            spec.loader.exec_module(module)
    except BaseException:
        if sys.modules.get(name) is module:
            del sys.modules[name]
        raise


def _real(entry: str) -> str:
    return os.path.realpath(entry or os.getcwd())   # "" on sys.path is the current directory
