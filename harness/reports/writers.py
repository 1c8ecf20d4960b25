"""Report formats by name: ``WRITERS[fmt](path, document)``.

The registry the front ends use for ``--json``, ``--junit``, ``--markdown`` and
``--html``; each writer renders the one report document (see
``json_report.build_document``) and is imported only when asked for, so a run
that writes no HTML never imports matplotlib.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable


def _json(path: str | os.PathLike, doc: dict) -> None:
    from harness.reports.json_report import write_document
    write_document(path, doc)


def _junit(path: str | os.PathLike, doc: dict) -> None:
    from harness.reports.junit import write_junit
    write_junit(path, doc)


def _markdown(path: str | os.PathLike, doc: dict) -> None:
    from harness.reports.markdown import render_markdown
    _atomic_text(Path(path), render_markdown(doc))


def _html(path: str | os.PathLike, doc: dict) -> None:
    from harness.reports.html import write_html
    write_html(path, doc)


def _atomic_text(path: Path, text: str) -> None:
    import tempfile
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


WRITERS: dict[str, Callable[[str | os.PathLike, dict], None]] = {
    "json": _json, "junit": _junit, "markdown": _markdown, "html": _html,
}
