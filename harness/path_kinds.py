"""What a path is, found with ``stat`` alone: a FIFO or a device is never opened to find out.

Opening a FIFO blocks until a writer comes, reading ``/dev/zero`` never ends: a case
directory, a log directory, a golden cache or a store that is one of them is refused in one
line (``UsageError``, exit 2) before any case runs, with what it is.
"""
from __future__ import annotations

import errno
import os
import stat

from harness.errors import UsageError


def special_kind(path: str | os.PathLike, *, follow: bool = True) -> str | None:
    """``"a FIFO"``, ``"a device"`` (character or block), ``"a socket"`` when ``path``
    (through symlinks, unless ``follow`` is off) is one of them; None for a regular file, a
    directory, a symlink not followed or nothing at all."""
    try:
        mode = os.stat(path).st_mode if follow else os.lstat(path).st_mode
    except (OSError, ValueError):       # ValueError: a NUL in the path
        return None
    return mode_kind(mode)


def mode_kind(mode: int) -> str | None:
    """``special_kind`` of an ``st_mode`` already read (``os.fstat`` of an open descriptor)."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def what_is(path: str | os.PathLike) -> str:
    """A short description of what ``path`` is (through symlinks), for a refusal."""
    kind = special_kind(path)
    if kind:
        return kind
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "missing" if not os.path.islink(path) else "a broken symlink"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop"
        return f"unreadable ({exc.strerror or exc})"
    except ValueError as exc:
        return f"unreadable ({getattr(exc, 'strerror', None) or exc})"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "not a regular file"


def require_directory(path: str | os.PathLike, flag: str) -> None:
    """``path`` is a directory or does not exist yet (it will be made): anything else, a regular
    file included, is a ``UsageError`` naming ``flag``."""
    if "\0" in os.fspath(path):
        raise UsageError(f"{flag} {os.fspath(path)!r}: holds a NUL byte")
    if not os.path.lexists(path) or os.path.isdir(path):
        parent = os.path.dirname(os.path.abspath(path))
        while not os.path.lexists(parent):
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise UsageError(f"{flag} {os.fspath(path)}: {parent} is {what_is(parent)}, expected a directory")
        return
    raise UsageError(f"{flag} {os.fspath(path)}: is {what_is(path)}, expected a directory")


def refuse_special(path: str | os.PathLike, flag: str, *, allow_char_devices: bool = False) -> None:
    """``path`` is no FIFO, socket or device (``allow_char_devices``: ``/dev/null`` is fine for a
    report): a ``UsageError`` naming ``flag`` with what it is."""
    kind = special_kind(path)
    if kind is None or (allow_char_devices and stat.S_ISCHR(os.stat(path).st_mode)):
        return
    raise UsageError(f"{flag} {os.fspath(path)}: is {kind}, expected a regular file")


def link_loop(path: str | os.PathLike) -> bool:
    """``path`` is a symlink that never reaches a file (``a -> b -> a``): ``stat`` says ELOOP, and
    ``Path.resolve`` raises ``RuntimeError``."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    except ValueError:
        return False
    return False


def refuse_special_path(path: str | os.PathLike, flag: str) -> None:
    """A path flag (``--kernel-path``, ``--rules``, ``--repo`` ...) that names a FIFO, a socket, a
    device or a symlink loop: a ``UsageError`` naming ``flag`` and what it is.  A FIFO on
    ``PYTHONPATH`` hangs every import (zipimport opens it), a FIFO given as a file to read hangs
    the read; refused here by ``stat`` alone, before anything opens it."""
    shown = os.fspath(path)
    if "\0" in shown:
        raise UsageError(f"{flag} {shown!r}: holds a NUL byte")
    kind = special_kind(path) or ("a symlink loop" if link_loop(path) else None)
    if kind:
        raise UsageError(f"{flag} {shown}: is {kind}, expected a directory or a regular file")
