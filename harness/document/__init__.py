"""The report document as data: what ``--json`` writes and every format renders (docs/json-schema.md).

Built here (``build_document``) by the session, ``harness compare``, ``harness bisect`` and
``harness report``, and read back here (``load_document``, ``results_of``, ``kind_of``); written
by ``harness.reports`` (JSON, JUnit, Markdown, HTML), whose renderers share the rest:

``summary``   what every run's summary counts, and the strict JSON every stored or written value
              passes through;
``table``     the engineers' table of results or of a document (``0/5 PASS, 5/5 FAIL_507018``);
``failures``  the failing results grouped per case and label, and the results' warnings;
``sections``  the document's provenance and flake statistics as plain text.

A report document is the dict ``build_document`` builds, plus optional keys other commands
add: ``kind`` (``run``, ``flake``, ``compare``, ``bisect``, ``merge``), ``run_id``, ``refs``
(the kernel-library checkouts: ``name``, ``sha``, ``subject``, ``build``), ``flake`` (per-case
hunt summaries) and ``shards``.  Results may carry ``ref``.  Pure data: no rendering, no torch.
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Mapping

from harness import __version__
from harness.document.summary import strict_json, summarize
from harness.outcomes import Result

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
    doc.update({k: strict_json(v) for k, v in extra.items() if v is not None})
    return doc


def load_document(path: str | os.PathLike) -> dict:
    """A ``--json`` file as a dict; ValueError naming the file when it is not one."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable report document ({type(exc).__name__}: {exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ValueError(f"{path}: not a report document (no \"results\" list)")
    return doc


def results_of(doc: Mapping[str, Any]) -> list[Result]:
    """The document's results as ``Result`` records (unknown keys ignored, ``ref`` kept)."""
    return [Result.from_json(r) for r in doc.get("results", [])]


def kind_of(doc: Mapping[str, Any]) -> str:
    kind = doc.get("kind") or "run"
    return kind if isinstance(kind, str) else "run"
