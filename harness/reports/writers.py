"""Report formats by name: ``WRITERS[fmt](path, document)``.

The registry the front ends use for ``--json``, ``--junit``, ``--markdown`` and
``--html``; each writer renders the one report document (see
``harness.report_document.build_document``) and is imported only when asked for, so a run
that writes no HTML never imports matplotlib.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

def _json(path: str | os.PathLike, doc: dict) -> None:
    from harness.reports.json_report import write_document
    write_document(path, doc)

def _junit(path: str | os.PathLike, doc: dict) -> None:
    from harness.reports.junit import write_junit
    write_junit(path, doc)

def _markdown(path: str | os.PathLike, doc: dict) -> None:
    from harness.files import write_text
    from harness.reports.markdown import render_markdown
    write_text(path, render_markdown(doc))

def _html(path: str | os.PathLike, doc: dict) -> None:
    from harness.reports.html import write_html
    write_html(path, doc)

WRITERS: dict[str, Callable[[str | os.PathLike, dict], None]] = {
    "json": _json, "junit": _junit, "markdown": _markdown, "html": _html,
}


@dataclass(frozen=True)
class Outputs:
    """The files a run writes besides the store (None: not asked for)."""

    json: str | None = None
    junit: str | None = None
    markdown: str | None = None
    html: str | None = None

    def any(self) -> bool:
        return any((self.json, self.junit, self.markdown, self.html))


def write_outputs(outputs: Outputs, doc: dict) -> list[str]:
    """Write each asked-for format from one document; returns what was written."""
    written = []
    for fmt, path in (("json", outputs.json), ("junit", outputs.junit), ("markdown", outputs.markdown),
                      ("html", outputs.html)):
        if path:
            WRITERS[fmt](path, doc)
            written.append(path)
    return written
