"""Text from outside (kernel logs, exception messages) made printable, the tail of a log file,
and the cap on a log's size.

Every renderer and the ref runner's ``BUILD_ERROR`` report read logs through here; the
device worker pool caps each case log once its case is over.
"""
from __future__ import annotations

import os
import re
from typing import Any

LOG_TAIL_LINES = 40
LOG_TAIL_BYTES = 8192

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# Not allowed in XML 1.0 (and invisible or harmful in HTML and Markdown).
_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff\ufffe\uffff]")   # _ILLEGAL, CR, ESC


def clean_text(text: Any) -> str:
    """Printable text: ANSI colour codes dropped, CR/LF normalised, every other
    control character (and what XML 1.0 forbids) shown as ``\\xNN``/``\\uNNNN``."""
    text = str(text)
    if not _CONTROL.search(text):                 # the common case: nothing to do
        return text
    text = _ANSI.sub("", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _ILLEGAL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def log_tail(path: str | os.PathLike | None, lines: int = LOG_TAIL_LINES,
             max_bytes: int = LOG_TAIL_BYTES) -> str | None:
    """The last ``lines`` lines of a log (at most ``max_bytes`` read from its end), cleaned.

    None when there is no such file.  A line cut by the byte cap is dropped.
    """
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read(max_bytes)
    except OSError:
        return None
    text = data.decode("utf-8", errors="replace")
    parts = text.splitlines()
    if size > max_bytes and parts:
        parts = parts[1:]
    return clean_text("\n".join(parts[-lines:]))


LOG_CAP_BYTES = 64 << 20


def cap_log(path: str | os.PathLike, max_bytes: int = LOG_CAP_BYTES) -> int:
    """Cut a log longer than ``max_bytes`` down to its first and last ``max_bytes // 2`` bytes,
    with a ``[... N bytes dropped ...]`` line between them: where a kernel started and how it
    ended are what a reader needs, and a kernel printing in a loop must not fill the disk case
    after case.  Returns the bytes dropped (0: short enough, or not readable)."""
    try:
        size = os.path.getsize(path)
        if size <= max_bytes:
            return 0
        half = max_bytes // 2
        dropped = size - 2 * half
        with open(path, "r+b") as fh:
            fh.seek(size - half)
            tail = fh.read(half)
            fh.seek(half)
            fh.write(f"\n[... {dropped} bytes dropped ...]\n".encode())
            fh.write(tail)
            fh.truncate()
        return dropped
    except OSError:
        return 0
