"""Report formats by name: ``WRITERS[fmt](path, document)``.

The registry the front ends use for ``--json``, ``--junit``, ``--markdown`` and
``--html``; each writer renders the one report document (see
``harness.document.build_document``) and is imported only when asked for, so a run
that writes no HTML never imports matplotlib.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Callable

from harness.errors import HarnessError, UsageError
from harness.files import WriteError, unwritable


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


FLAGS = {"json": "--json", "junit": "--junit", "markdown": "--markdown", "html": "--html"}


class OutputPathError(UsageError):
    """An output path that cannot be written (a directory, a read-only place): exit 2 before any case."""


class OutputError(HarnessError):
    """Report files that failed to write after the run (disk full): exit 3; the results are in the store."""


@dataclass(frozen=True)
class Outputs:
    """The files a run writes besides the store (None: not asked for)."""

    json: str | None = None
    junit: str | None = None
    markdown: str | None = None
    html: str | None = None

    def any(self) -> bool:
        return any((self.json, self.junit, self.markdown, self.html))

    def asked(self) -> list[tuple[str, str]]:
        """``(format, path)`` of each file asked for, in flag order."""
        return [(f.name, getattr(self, f.name)) for f in fields(self) if getattr(self, f.name)]


def check_outputs(outputs: Outputs) -> None:
    """Refuse, before anything runs, a path no report could be written to."""
    for fmt, path in outputs.asked():
        why = unwritable(path)
        if why:
            raise OutputPathError(f"{FLAGS[fmt]} {path}: {why}")


def write_outputs(outputs: Outputs, doc: dict) -> list[str]:
    """Write each asked-for format from one document; returns what was written.  One that fails
    does not stop the others; then ``OutputError`` says which failed."""
    written, failed = [], []
    for fmt, path in outputs.asked():
        try:
            WRITERS[fmt](path, doc)
        except WriteError as exc:
            failed.append(f"{FLAGS[fmt]}: {exc}")
        else:
            written.append(path)
    if failed:
        raise OutputError("; ".join(failed) + (f" (written: {', '.join(written)})" if written else ""))
    return written
