"""The report document as data: what ``--json`` writes and every format renders (docs/json-schema.md).

Built here (``build_document``) by the session, ``harness compare``, ``harness bisect`` and
``harness report``; written by ``harness.reports`` (JSON, JUnit, Markdown, HTML).

``summary``  what every run's summary counts, and the strict JSON every stored or written value
             passes through;
``table``    the engineers' table of results (``0/5 PASS, 5/5 FAIL_507018``).

Pure data: no rendering, no torch.
"""
from __future__ import annotations

import socket
import time

from harness import __version__
from harness.outcomes import Result
from harness.document.summary import strict_json, summarize

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
