"""The ``--build`` command in a ref's worktree: run once per worktree and command, remembered by a marker."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.files import write_text
from harness.processes import terminate
from harness.refs.git import Commit
from harness.refs.worktrees import FileLock, Worktree


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    returncode: int | None       # None: timed out (the process group was killed)
    log_path: Path
    duration_s: float
    timed_out: bool = False
    cached: bool = False         # a marker said this worktree was already built with this command


def _marker(state_dir: Path, cmd: str) -> Path:
    return state_dir / f"built-{hashlib.sha256(cmd.encode()).hexdigest()[:16]}.json"


def _read_marker(path: Path, cmd: str) -> dict | None:
    """The marker's record, or None when absent or unreadable (bad data reads as 'not built')."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("cmd") == cmd else None


def _run_build(cwd: Path, cmd: str, log_path: Path, env: Mapping[str, str] | None,
               timeout_s: float) -> BuildResult:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log_path, "ab") as log:
        log.write(f"[harness] build in {cwd}: {cmd}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, shell=True, cwd=cwd, env=dict(os.environ if env is None else env),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)   # its own group: a timeout kills make's children too
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            if proc.poll() is None:
                terminate(proc, group=True)
        duration = time.monotonic() - start
        verdict = (f"timed out after {timeout_s:g} s, killed" if returncode is None
                   else f"exit status {returncode}")
        log.write(f"\n[harness] build {verdict}\n".encode())
    return BuildResult(ok=returncode == 0, returncode=returncode, log_path=log_path, duration_s=duration,
                       timed_out=returncode is None)


def build(worktree: Worktree | str | os.PathLike[str], cmd: str, log_path: str | os.PathLike[str],
          env: Mapping[str, str] | None, timeout_s: float) -> BuildResult:
    """Run ``cmd`` through the shell in ``worktree``, output to ``log_path`` (appended).

    A failing or timed-out build is a result (``ok=False``), not an exception.  Given a
    ``Worktree`` (from ``Worktrees.materialize``), a successful build leaves a marker keyed
    by the command; a later call with the same command returns ``cached=True`` without
    running it (the log then says so).  Failures are not remembered: the next call
    builds again.  Concurrent builds of one worktree are serialised by a lock.
    A plain path is built every time.
    """
    log_path = Path(log_path)
    if not isinstance(worktree, Worktree):
        return _run_build(Path(worktree), cmd, log_path, env, timeout_s)
    worktree.state_dir.mkdir(parents=True, exist_ok=True)
    marker = _marker(worktree.state_dir, cmd)
    lock = FileLock(worktree.state_dir / "build.lock")
    try:
        lock.exclusive()
        record = _read_marker(marker, cmd)
        if record is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "a") as log:
                log.write(f"[harness] build cached: {worktree.sha[:12]} already built with {cmd!r} "
                          f"at {record.get('built_at', '?')} (log {record.get('log', '?')})\n")
            return BuildResult(ok=True, returncode=0, log_path=log_path, duration_s=0.0, cached=True)
        result = _run_build(worktree.path, cmd, log_path, env, timeout_s)
        if result.ok:
            write_text(marker, json.dumps({"cmd": cmd, "sha": worktree.sha, "log": str(log_path),
                                              "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
        return result
    finally:
        lock.close()


def ref_provenance(name: str, commit: Commit, build_result: BuildResult | None = None, *,
                   worktree: str | os.PathLike[str] | None = None) -> dict:
    """What a report records about one ref: which commit, and how its build went."""
    doc: dict = {"name": name, "sha": commit.sha, "subject": commit.subject,
                 "author_date": commit.author_date, "author": commit.author,
                 "worktree": str(worktree) if worktree is not None else None, "build": None}
    if build_result is not None:
        doc["build"] = {"ok": build_result.ok, "log": str(build_result.log_path),
                        "returncode": build_result.returncode, "timed_out": build_result.timed_out,
                        "cached": build_result.cached}
    return doc
