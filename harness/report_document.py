"""The report document as data: what ``--json`` writes and every format renders (docs/json-schema.md).

Built by the session, ``harness compare`` and ``harness report``; written by
``harness.reports`` (JSON, JUnit, Markdown, HTML).
"""
from __future__ import annotations

import socket
import time

from harness import __version__
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
    doc.update({k: strict_json(v) for k, v in extra.items() if v is not None})
    return doc
