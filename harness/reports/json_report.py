"""The ``--json`` file: the report document (``harness.document``) as strict JSON."""
from __future__ import annotations

import json
import os

from harness.files import atomic_path


def write_document(path: str | os.PathLike, doc: dict) -> None:
    """Write a report document as JSON, atomically."""
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1, default=str, allow_nan=False)
