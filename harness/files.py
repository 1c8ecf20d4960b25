"""Files appear whole or not at all: written to a temporary file beside them, then renamed.

A path that is not a regular file is written through, never renamed over: a symlink's
target is replaced (the link stays a link), a FIFO with a reader or a character device
(``/dev/null``) is opened and written; a FIFO nobody reads, a block device or a socket is
refused up front (``unwritable``).  A write that fails is a ``WriteError``, one line.

``user_cache_dir`` is where the harness keeps what it can rebuild (goldens, spec-module
checks, per-repository state); the run options and the case-file loader both name it.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from harness.errors import HarnessError
from harness.path_kinds import special_kind


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
    kind = special_kind(target)
    if kind == "a FIFO" and not _fifo_has_reader(target):
        return "is a FIFO that nothing reads (writing the report would wait forever)"
    if kind in ("a socket", "a device") and not stat.S_ISCHR(os.stat(target).st_mode):
        return f"is {kind if kind == 'a socket' else 'a block device'}"
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


# Write ends opened to see that a FIFO has a reader, kept open until the process ends: closing
# the only write end would hand that reader its end of file before the report is written.
_FIFO_PROBES: list[int] = []


def _fifo_has_reader(path: Path) -> bool:
    """A non-blocking open for writing fails with ENXIO exactly when no process reads the FIFO."""
    try:
        _FIFO_PROBES.append(os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))
    except OSError:
        return False
    return True


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/fused-kernel-harness``, else ``~/.cache/fused-kernel-harness``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "fused-kernel-harness"
