"""Files appear whole or not at all: written to a temporary file beside them, then renamed.

A path that is not a regular file is written through, never renamed over: a symlink's
target is replaced (the link stays a link), a FIFO or a device (``/dev/null``) is opened
and written.  A write that fails is a ``WriteError``, one line.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from harness.errors import HarnessError


class WriteError(HarnessError, OSError):
    """A file could not be written (disk full, a device that refuses, ...): one line, exit 3; an
    ``OSError`` too, so code that keeps going without a file (the golden cache) still does."""


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path to write; when the block succeeds it becomes ``path`` (renamed onto a
    regular file, so a reader never sees half a file and a crash never leaves one; copied into
    anything else).  An ``OSError`` becomes a ``WriteError`` naming ``path``."""
    target = Path(os.path.realpath(path))     # through symlinks: the link stays, its target is written
    try:
        if target.exists() and not target.is_file():
            if target.is_dir():
                raise IsADirectoryError("is a directory")
            with tempfile.TemporaryDirectory(prefix="harness-write-") as scratch:
                tmp = Path(scratch) / "content"
                yield tmp
                with open(tmp, "rb") as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
        os.close(fd)
        try:
            yield Path(tmp_name)
            os.chmod(tmp_name, 0o666 & ~_umask())     # mkstemp's 0600 is wrong for a report others read
            os.replace(tmp_name, target)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise WriteError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}") from None


def unwritable(path: str | os.PathLike) -> str | None:
    """Why ``atomic_path(path)`` would fail before anything is written (a directory, a read-only
    place, a parent that is a file), or None.  Checked with ``os.access``: as root, permission
    bits do not stop a write, a read-only file system still does."""
    target = Path(os.path.realpath(path))
    if target.is_dir():
        return "is a directory"
    if target.exists() and not target.is_file():
        return None if os.access(target, os.W_OK) else "not writable"
    parent = target.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create files in {parent}"
    if target.exists() and not os.access(target, os.W_OK):
        return "not writable"
    return None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
