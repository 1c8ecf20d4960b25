"""The ``--json`` file: ``{"results": [...], "summary": {...}}`` (schema in docs/json-schema.md)."""
from __future__ import annotations

import json
import os
import socket
import time

from harness import __version__
from harness.files import atomic_path
from harness.outcomes import Result
from harness.summary import strict_json, summarize

SCHEMA_VERSION = 1


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
        "provenance": strict_json(provenance or {}),
        "results": [strict_json(r.to_json()) for r in results],
        "summary": summarize(results),
    }
    doc.update({k: strict_json(v) for k, v in extra.items() if v is not None and k != "summary_extra"})
    return doc


def write_document(path: str | os.PathLike, doc: dict) -> None:
    """Write a report document as JSON, atomically."""
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1, default=str, allow_nan=False)
