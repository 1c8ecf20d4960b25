"""The ``--json`` file: ``{"results": [...], "summary": {...}}`` (schema in docs/json-schema.md)."""
from __future__ import annotations

import json
import math
import os
import socket
import time
from collections import Counter
from typing import Iterable

from harness.files import atomic_path
from harness import __version__
from harness.outcomes import Outcome, Result

SCHEMA_VERSION = 1


def _strict(value):
    """Strict JSON: NaN becomes null, infinities the strings "Infinity"/"-Infinity"."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def summarize(results: Iterable[Result]) -> dict:
    results = list(results)
    labels = Counter(r.label for r in results)
    outcomes = Counter(r.outcome.value for r in results)
    golden_computed = sum(1 for r in results if r.metrics.get("golden_cache_hit") is False)
    golden_hits = sum(1 for r in results if r.metrics.get("golden_cache_hit") is True)
    return {
        "total": len(results),
        "passed": sum(r.outcome.passed for r in results),
        "failed": sum(r.outcome.failed for r in results),
        "skipped": outcomes.get(Outcome.SKIPPED.value, 0),
        "counts": dict(sorted(labels.items())),
        "outcomes": dict(sorted(outcomes.items())),
        "duration_s": round(sum(r.duration_s for r in results), 6),
        "golden_cache": {"computed": golden_computed, "hits": golden_hits},
    }


def build_document(results: list[Result], *, started: float, devices: list[str], command: list[str],
                   provenance: dict | None = None, **extra) -> dict:
    """The report document every format renders: the ``--json`` schema, plus optional keys
    (``kind``, ``run_id``, ``refs``, ``flake``, ``compare``, ``bisect``, ``shards``, ``warnings``)."""
    doc = {
        "schema": SCHEMA_VERSION,
        "harness_version": __version__,
        "command": list(command),
        "host": socket.gethostname(),
        "started": started,
        "finished": time.time(),
        "devices": devices,
        "provenance": _strict(provenance or {}),
        "results": [_strict(r.to_json()) for r in results],
        "summary": summarize(results),
    }
    doc.update({k: _strict(v) for k, v in extra.items() if v is not None})
    return doc


def write_json(path: str | os.PathLike, results: list[Result], *, started: float, devices: list[str],
               command: list[str], provenance: dict | None = None, **extra) -> None:
    """Atomic: a reader never sees half a file, a crash never leaves one."""
    write_document(path, build_document(results, started=started, devices=devices, command=command,
                                        provenance=provenance, **extra))


def write_document(path: str | os.PathLike, doc: dict) -> None:
    """Write a report document as JSON, atomically."""
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1, default=str, allow_nan=False)
