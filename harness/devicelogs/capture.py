"""Where a worker's device logs go, what was there when a case began, what it added."""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from harness.logs import clean_text

LOG_PATH_ENV = "ASCEND_PROCESS_LOG_PATH"    # CANN's application logs (plog) go under it
MAX_FILES = 4096            # a directory listing bounded: a huge or hostile log tree costs this, not more
READ_CAP = 4 << 20          # bytes read from all files of one failed case (the newest part of each)
EXCERPT_CAP = 32 << 10      # characters kept on the result
KEEP_BYTES = 256 << 20      # a worker's log directory is pruned, oldest files first, past this
# A plog file's name carries the writing process's pid: plog-<pid>_<timestamp>.log (device-<pid>_...).
_PID_IN_NAME = re.compile(r"^(?:plog|device|pid)-(\d+)_")
# What a reader needs first: error-level lines and the runtime's exception blocks.
_FIRST = re.compile(r"^\[(?:ERROR|EVENT)\]|\bE[A-Z]\d{4}\b|[Aa]i[Cc]ore|[Aa]i[Vv]ec|error code|runtime result|retCode")


@dataclass(frozen=True)
class DeviceLog:
    """The log lines a failed case made the runtime write, error lines first."""

    text: str
    files: tuple[str, ...]      # relative to the directory read
    bytes_read: int
    truncated: bool
    directory: str

    def to_metrics(self) -> dict:
        return {"directory": self.directory, "files": list(self.files), "bytes_read": self.bytes_read,
                "truncated": self.truncated, "text": self.text}


@dataclass(frozen=True)
class Mark:
    """Sizes of the files under ``directory`` when a case began (by device and inode)."""

    directory: Path
    sizes: dict[str, tuple[int, int, int]] = field(default_factory=dict)   # rel path → (dev, ino, size)
    own: bool = True            # the harness's own directory: every file is this worker's
    pids: set[int] | None = None   # a shared directory: the processes whose files are read


def log_env(run_log_dir: Path, worker: str, device_text: str, env: Mapping[str, str]) -> dict[str, str]:
    """``ASCEND_PROCESS_LOG_PATH`` for one worker process (``worker``: its name and start count):
    its own directory under the run's, so a case's listing is a few files whatever the run left
    before it; unless the user named one (then it is honoured, and read with other processes'
    files left out)."""
    if env.get(LOG_PATH_ENV):
        return {}
    return {LOG_PATH_ENV: str(run_log_dir / DEVICE_LOGS / f"{worker}-{device_text.replace(':', '')}")}


DEVICE_LOGS = "device-logs"     # under the run's log directory


def _files(directory: Path, pids: set[int] | None = None) -> dict[str, tuple[int, int, int]]:
    """Regular files under ``directory`` (links and special files never followed or opened);
    with ``pids``, files named for another process are skipped before they cost a stat."""
    found: dict[str, tuple[int, int, int]] = {}
    stack = [directory]
    while stack and len(found) < MAX_FILES:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if pids is not None and not _written_by(entry.name, pids):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(Path(entry.path))
            elif stat.S_ISREG(st.st_mode):
                found[os.path.relpath(entry.path, directory)] = (st.st_dev, st.st_ino, st.st_size)
                if len(found) >= MAX_FILES:
                    break
    return found


def mark(directory: str | Path | None, own: bool = True, pids: set[int] | None = None) -> Mark | None:
    """What is under ``directory`` now (None when there is no directory to watch).  In a shared
    directory (``own`` false) only files of ``pids`` (or named for no pid) are listed."""
    if not directory:
        return None
    directory = Path(directory)
    return Mark(directory, _files(directory, None if own else pids) if directory.is_dir() else {}, own, pids)


def _written_by(rel: str, pids: set[int]) -> bool:
    """A file not named for a pid, or named for one of ``pids`` (folders have no pid in their name)."""
    m = _PID_IN_NAME.match(os.path.basename(rel))
    return m is None or int(m.group(1)) in pids


def since(start: Mark | None, pids: set[int]) -> DeviceLog | None:
    """What was appended under ``start.directory`` since ``start``: new files, grown files (a
    file replaced by rotation read whole).  In a directory shared with other processes (the
    user's own ``ASCEND_PROCESS_LOG_PATH``) a file named for another pid is left out.  None when
    nothing was written."""
    if start is None:
        return None
    pids = pids | (start.pids or set())
    now = _files(start.directory, None if start.own else pids)
    pieces: list[tuple[str, int, int]] = []      # rel, offset, end
    for rel, (dev, ino, size) in sorted(now.items()):
        if not start.own and not _written_by(rel, pids):
            continue
        before = start.sizes.get(rel)
        offset = before[2] if before and before[:2] == (dev, ino) and before[2] <= size else 0
        if size > offset:
            pieces.append((rel, offset, size))
    if not pieces:
        return None
    budget, chunks, read, truncated = READ_CAP, [], 0, False
    for rel, offset, end in reversed(pieces):            # the newest part of each file, last files first
        if budget <= 0:
            truncated = True
            break
        take = min(end - offset, budget)
        truncated |= take < end - offset
        try:
            with open(start.directory / rel, "rb") as fh:
                fh.seek(end - take)
                data = fh.read(take)
        except OSError:
            continue
        budget -= len(data)
        read += len(data)
        chunks.append((rel, data))
    chunks.reverse()
    text, cut = excerpt("\n".join(clean_text(data.decode("utf-8", "replace")) for _, data in chunks))
    return DeviceLog(text, tuple(rel for rel, _ in chunks), read, truncated or cut, str(start.directory))


def excerpt(text: str, cap: int = EXCERPT_CAP) -> tuple[str, bool]:
    """Error lines and exception blocks first (in their order), then the other lines, to ``cap``."""
    first, rest = [], []
    for line in text.splitlines():
        if line.strip():
            (first if _FIRST.search(line) else rest).append(line)
    out, size = [], 0
    for line in first + (["-- other lines --"] + rest if rest else []):
        if size + len(line) + 1 > cap:
            return "\n".join(out), True
        out.append(line)
        size += len(line) + 1
    return "\n".join(out), False


def prune(directory: str | Path | None, keep_bytes: int = KEEP_BYTES) -> list[str]:
    """Delete the oldest files under the harness's own ``directory`` past ``keep_bytes`` in all
    (a run's device logs are kept, but not without bound).  Returns what was removed."""
    if not directory or not Path(directory).is_dir():
        return []
    directory = Path(directory)
    files = []
    for rel, (_, _, size) in _files(directory).items():
        try:
            files.append((os.stat(directory / rel, follow_symlinks=False).st_mtime, rel, size))
        except OSError:
            continue
    total = sum(size for _, _, size in files)
    removed = []
    for _, rel, size in sorted(files):
        if total <= keep_bytes:
            break
        try:
            os.unlink(directory / rel)
        except OSError:
            continue
        total -= size
        removed.append(rel)
    return removed
