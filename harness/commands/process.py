"""One command in a session of its own: output captured (head and tail), timeout, the session killed.

The command is the leader of a new session (``start_new_session``), so everything
it starts, whatever process group it moves to, carries the session id.  When its
timeout passes, every process of the session gets SIGTERM, then SIGKILL (found
through ``/proc``: a child that made its own process group is still found; one
that started a session of its own has left on purpose and is not).  When it ends
by itself, the session is scanned the same way only where something is left: its
process group is not empty, or the output pipe is still held open (a scan of
``/proc`` costs ~10 ms on a loaded host, more than spawning the command).  stdout and stderr go to one pipe, read by a thread that keeps the first
and last ``cap_bytes // 2`` bytes and counts the rest, so gigabytes of output cost
no memory and no disk.  A program that cannot be started (``FileNotFoundError``,
``PermissionError``) is reported as data, not raised.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness import trace
from harness.processes import process_state

OUTPUT_CAP_BYTES = 8 << 20       # per command: its first and last 4 MiB kept
TERM_GRACE_S = 3.0
_CHUNK = 1 << 16
_DRAIN_S = 2.0                   # after the session is gone, the pipe's last bytes are read within this
_HELD_S = 0.05                   # a pipe still open this long after the leader ended: someone in the session holds it


@dataclass(frozen=True)
class Finished:
    """What one command came to."""

    argv: tuple[str, ...]
    returncode: int | None          # None: it never started, or did not end (timed out)
    output: bytes                   # head and tail, with a "[... N bytes dropped ...]" line between
    output_bytes: int               # everything it printed
    duration_s: float
    timed_out: bool = False
    not_started: str | None = None  # why the program could not be started
    leftovers: int = 0              # processes still in its session once it had ended, then killed


class _Capture(threading.Thread):
    """Reads a pipe to its end, keeping its head and tail."""

    def __init__(self, pipe, cap_bytes: int):
        super().__init__(name="command-output", daemon=True)
        self.pipe = pipe
        self.half = max(1, cap_bytes // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def run(self) -> None:
        read = self.pipe.read1 if hasattr(self.pipe, "read1") else self.pipe.read
        try:
            while chunk := read(_CHUNK):
                self.total += len(chunk)
                room = self.half - len(self.head)
                if room > 0:
                    self.head += chunk[:room]
                    chunk = chunk[room:]
                if chunk:
                    self.tail += chunk
                    if len(self.tail) > 2 * self.half:      # trimmed now and then, not per chunk
                        del self.tail[:-self.half]
        except (OSError, ValueError):                       # the pipe closed under us
            pass

    def output(self) -> bytes:
        tail = bytes(self.tail[-self.half:])
        dropped = self.total - len(self.head) - len(tail)
        if dropped > 0:
            return bytes(self.head) + f"\n[... {dropped} bytes dropped ...]\n".encode() + tail
        return bytes(self.head) + tail


def session_members(sid: int) -> list[int]:
    """Pids of every process in session ``sid`` (from /proc; [] where there is none)."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 3 and int(fields[3]) == sid:
            found.append(int(entry))
    return found


def kill_session(sid: int, grace_s: float = TERM_GRACE_S) -> int:
    """SIGTERM every process of session ``sid``, SIGKILL what is left after ``grace_s``; the count signalled."""
    members = session_members(sid)
    if not members:
        return 0
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 1.0)):
        trace.log.debug("command session %d: %s to %d processes", sid, sig.name, len(members))
        for pid in members:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not [p for p in session_members(sid) if process_state(p) not in ("Z", "")]:   # gone or zombies
                return len(members)
            time.sleep(0.02)
        members = session_members(sid) or members
    return len(members)


def _group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a process left (the cheap question; a scan of the session is not)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _drained(capture: "_Capture") -> bool:
    """Whether the output pipe was closed by everyone once the leader ended (nobody still holds it)."""
    capture.join(_HELD_S)
    return not capture.is_alive()


class Sessions:
    """The command sessions running for one owner (an engine): ``kill_all`` when it closes, so an
    interrupted run (Ctrl-C, SIGTERM) leaves no command behind in a thread that will never reap it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[int] = set()

    def add(self, sid: int) -> None:
        with self._lock:
            self._running.add(sid)

    def discard(self, sid: int) -> None:
        with self._lock:
            self._running.discard(sid)

    def kill_all(self, grace_s: float = 0.5) -> None:
        with self._lock:
            running, self._running = sorted(self._running), set()
        for sid in running:
            kill_session(sid, grace_s)


def run(argv: list[str], *, cwd: str | os.PathLike, env: dict[str, str], timeout_s: float,
        cap_bytes: int = OUTPUT_CAP_BYTES, grace_s: float = TERM_GRACE_S, sessions: Sessions | None = None) -> Finished:
    """Run ``argv`` (no shell: a shell command is ``["/bin/sh", "-c", text]``) to its end or its timeout
    (``sessions``: where it is registered while it runs)."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        why = f"{exc.strerror or exc}: {exc.filename or argv[0]}"
        return Finished(tuple(argv), None, b"", 0, time.monotonic() - started, not_started=why)
    trace.log.debug("command started: pid %d: %s (cwd %s)", proc.pid, argv, cwd)
    if sessions is not None:
        sessions.add(proc.pid)
    capture = _Capture(proc.stdout, cap_bytes)
    capture.start()
    timed_out = False
    try:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            trace.log.debug("command pid %d: no end within timeout_s=%g", proc.pid, timeout_s)
        if timed_out:
            kill_session(proc.pid, grace_s)             # the leader and everything it started
            leftovers = 0                               # killed for the timeout, not left behind
        elif _group_alive(proc.pid) or not _drained(capture):
            leftovers = kill_session(proc.pid, grace_s)  # what it left running (or holding the output open)
        else:
            leftovers = 0
        proc.wait()
    finally:
        if proc.poll() is None:                         # an interrupt: nothing outlives the harness
            kill_session(proc.pid, 0.2)
            proc.wait()
        if sessions is not None:
            sessions.discard(proc.pid)
        capture.join(_DRAIN_S)
        proc.stdout.close()
    return Finished(tuple(argv), None if timed_out else proc.returncode, capture.output(), capture.total,
                    time.monotonic() - started, timed_out=timed_out, leftovers=leftovers)


def write_output(path: Path, finished: Finished) -> None:
    """The captured output as the case's log (bytes as printed; binary output stays binary)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(finished.output)
