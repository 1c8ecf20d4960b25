"""What the load-time check of a spec module found, kept so an unchanged module is not imported again.

``harness.worker.spec_check`` imports torch and the user's module in a short-lived interpreter
(about 2 s); every ``harness run cases`` / ``list cases`` would pay it for each spec file.  Its
answer for a request is stored here under a key of the request (module, golden, params, seed,
``compare:``), the import path (``--kernel-path`` dirs and ``PYTHONPATH``), the interpreter and
the harness's own checking code, with the sha256 of every source file the check imported
(the module, its package, its helpers, a ``golden`` package beside it) and where the module's
top-level package is found on the path.  An entry is used only when every one of those files
still hashes the same and the package is still found in the same place: a changed module (or
helper), a new one shadowing it, a deleted file, is a fresh check.  Only answers without an
error are kept (an error names what to fix and is checked again next time).

Files: ``<user cache>/spec-checks/<key>.json`` (``$HARNESS_SPEC_CHECK_CACHE`` another directory,
or ``off``), written atomically; an unreadable, old-format or mismatched entry reads as
nothing.  No torch here: the front end reads it.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from harness.files import WriteError, atomic_path, user_cache_dir

FORMAT = 1
CACHE_VAR = "HARNESS_SPEC_CHECK_CACHE"
_HARNESS = Path(__file__).resolve().parents[1]
# The harness code whose answer is cached: a change to any of it is a new key.
_CHECKING_CODE = ("worker/spec_check.py", "worker/spec_module.py", "comparators.py", "casefiles/spec_cache.py")


def cache_dir() -> Path | None:
    explicit = os.environ.get(CACHE_VAR, "")
    if explicit.lower() in ("off", "0", "none"):
        return None
    if explicit:
        return Path(explicit).expanduser()
    return user_cache_dir() / "spec-checks"


def _sha(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def key(request: dict, paths: Sequence[str]) -> str:
    code = {rel: _sha(str(_HARNESS / rel)) for rel in _CHECKING_CODE}
    blob = json.dumps({"format": FORMAT, "request": request, "paths": list(paths), "python": sys.executable,
                       "code": code}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def where_found(module: str, paths: Sequence[str]) -> str | None:
    """The first path entry holding the module's top-level package (``top/`` or ``top.py``), as
    the import would find it on these entries (site-packages and the stdlib are not looked at)."""
    top = module.split(".", 1)[0]
    for p in paths:
        base = Path(p)
        for candidate in (base / top, base / f"{top}.py"):
            if candidate.exists():
                return str(candidate)
    return None


def read(k: str, module: str, paths: Sequence[str]) -> dict | None:
    """The cached answer, or None (no entry, unreadable, another format, a source that changed)."""
    d = cache_dir()
    if d is None:
        return None
    try:
        entry = json.loads((d / f"{k}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != k:
        return None
    sources, answer = entry.get("sources"), entry.get("answer")
    if not isinstance(sources, dict) or not isinstance(answer, dict) or "error" in answer or "tables" not in answer:
        return None
    if entry.get("found") != where_found(module, paths):
        return None
    for path, digest in sources.items():
        if _sha(path) != digest:
            return None
    return answer


def write(k: str, module: str, paths: Sequence[str], answer: dict, sources: Sequence[str]) -> None:
    """Keep a clean answer with the hashes of the files it came from; a failed write is no cache."""
    d = cache_dir()
    if d is None or "error" in answer:
        return
    hashed = {p: _sha(p) for p in sources}
    if any(v is None for v in hashed.values()):
        return
    entry: dict[str, Any] = {"format": FORMAT, "key": k, "found": where_found(module, paths), "sources": hashed,
                             "answer": answer}
    try:
        with atomic_path(d / f"{k}.json") as tmp:
            tmp.write_text(json.dumps(entry))
    except (OSError, WriteError):
        pass


__all__ = ["CACHE_VAR", "cache_dir", "key", "read", "where_found", "write"]
