"""Cached detached worktrees of a repository's commits, shared safely between processes.

The cache (``Worktrees.root``; docs/refs.md)::

    <root>/<sha>/          the detached worktree
    <root>/<sha>.lock      flock: shared while in use, exclusive to create or remove
    <root>/<sha>.state/    build markers (one per build command) and the build lock
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import random
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.refs.git import SHA, Commit, open_repo, run_git, sha_of, text_of
from harness.refs.spec import RefError

CACHE_ENV = "HARNESS_WORKTREE_CACHE"
DEFAULT_CACHE = Path("~/.cache/harness/worktrees")
_LOCK_POLL_S = (0.02, 0.1)       # jittered wait between tries for an exclusive lock


@dataclass(frozen=True)
class Worktree:
    """A materialised commit: the checkout and the directory holding its build markers."""

    sha: str
    path: Path
    state_dir: Path
    reused: bool        # False: checked out by this call


def default_cache_root(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def repo_cache_dir(repo_path: Path, base: Path) -> Path:
    """``<base>/<repo-name>-<hash of the repo's absolute path>``: one directory per repository."""
    digest = hashlib.sha256(str(repo_path).encode()).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", repo_path.name.removesuffix(".git")) or "repo"
    return base / f"{name}-{digest}"


class FileLock:
    """One flock'ed file descriptor: shared while a worktree is in use, exclusive to change it."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def shared(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_SH)

    def exclusive(self, wait: bool = True) -> bool:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        return True

    def unlock(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self.fd)       # releases the lock


class Worktrees:
    """Detached worktrees of one repository's commits, cached outside its working tree.

    ``materialize(commit)`` returns a ``Worktree`` reused while intact (HEAD at the
    commit, tracked files unmodified) and re-created otherwise.  Each materialised
    worktree stays share-locked until ``release(sha)``, ``close()`` or the end of the
    ``with`` block, so another process's ``remove``/``clean`` or re-creation waits
    for it.  Use as a context manager.
    """

    def __init__(self, repo: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None, *,
                 env: Mapping[str, str] | None = None, lock_timeout_s: float = 600.0):
        self.repo = open_repo(repo)
        base = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root(env)
        self.root = repo_cache_dir(self.repo.path, base.resolve())
        if not self.repo.bare and self.root.is_relative_to(self.repo.path):
            raise RefError(f"worktree cache {self.root}: inside the working tree of {self.repo.path}; "
                           f"choose a directory outside it (${CACHE_ENV})")
        self.lock_timeout_s = lock_timeout_s
        self._held: dict[str, FileLock] = {}

    # -- context manager ---------------------------------------------------------
    def __enter__(self) -> Worktrees:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release every worktree this object holds (the checkouts stay cached)."""
        held, self._held = self._held, {}
        for lock in held.values():
            lock.close()

    def release(self, sha: str) -> None:
        lock = self._held.pop(sha, None)
        if lock is not None:
            lock.close()

    # -- layout ------------------------------------------------------------------
    def path_for(self, sha: str) -> Path:
        return self.root / sha

    def state_dir_for(self, sha: str) -> Path:
        return self.root / f"{sha}.state"

    def _lock(self, sha: str) -> FileLock:
        if sha not in self._held:
            self._held[sha] = FileLock(self.root / f"{sha}.lock")
        return self._held[sha]

    def cached(self) -> list[str]:
        """The shas with a checkout directory in the cache (intact or not)."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and SHA.fullmatch(p.name))

    # -- materialise -------------------------------------------------------------
    def intact(self, sha: str) -> bool:
        """The checkout exists, belongs to this repository, sits at ``sha`` and has no tracked change."""
        path = self.path_for(sha)
        if not (path / ".git").exists():
            return False
        proc = run_git(path, "rev-parse", "HEAD", "--path-format=absolute", "--show-toplevel", "--git-common-dir",
                    check=False)
        lines = text_of(proc).splitlines()
        if proc.returncode != 0 or len(lines) != 3 or lines[0].strip() != sha:
            return False
        if Path(lines[1].strip()).resolve() != path or Path(lines[2].strip()).resolve() != self.repo.common_dir:
            return False
        status = run_git(path, "status", "--porcelain", "--untracked-files=no", "--ignore-submodules=none",
                      check=False)
        return status.returncode == 0 and not status.stdout.strip()

    def materialize(self, commit: Commit | str) -> Worktree:
        sha = sha_of(commit, "commit")
        lock = self._lock(sha)
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            lock.shared()                     # waits only while someone creates or removes it
            if self.intact(sha):
                return Worktree(sha, self.path_for(sha), self.state_dir_for(sha), reused=True)
            lock.unlock()
            if lock.exclusive(wait=False):
                try:
                    if self.intact(sha):      # another process made it between our two locks
                        return Worktree(sha, self.path_for(sha), self.state_dir_for(sha), reused=True)
                    self._discard(sha)
                    self._add(sha)
                    return Worktree(sha, self.path_for(sha), self.state_dir_for(sha), reused=False)
                except BaseException:
                    self.release(sha)
                    raise
                finally:
                    if sha in self._held:
                        lock.shared()         # keep it while in use
            if time.monotonic() > deadline:
                raise RefError(f"worktree {self.path_for(sha)}: damaged and in use by another process "
                               f"for over {self.lock_timeout_s:.0f} s")
            time.sleep(random.uniform(*_LOCK_POLL_S))

    def _registered(self, path: Path) -> bool:
        listing = text_of(run_git(self.repo.path, "worktree", "list", "--porcelain"))
        return any(line == f"worktree {path}" for line in listing.splitlines())

    def _discard(self, sha: str) -> None:
        """Remove the checkout, its registration and its build markers (caller holds the exclusive lock)."""
        path = self.path_for(sha)
        if self._registered(path):
            run_git(self.repo.path, "worktree", "remove", "--force", "--force", str(path), check=False)
        if path.exists() or path.is_symlink():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        if self._registered(path):
            self.prune()
        shutil.rmtree(self.state_dir_for(sha), ignore_errors=True)

    def _add(self, sha: str) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.path_for(sha)
        run_git(self.repo.path, "worktree", "add", "--detach", "--quiet", str(path), sha)
        if not self.intact(sha):
            raise RefError(f"worktree {path}: checked out {sha[:12]} but it does not verify")

    # -- removal -----------------------------------------------------------------
    def prune(self) -> None:
        """Drop git's registrations of worktrees whose directories are gone (``git worktree prune``)."""
        run_git(self.repo.path, "worktree", "prune")

    def remove(self, sha: str) -> bool:
        """Remove one cached worktree and its build markers; False when there was nothing to remove.

        RefError when another process (or another ``Worktrees``) is using it.
        """
        sha = sha_of(sha, "commit")
        lock = self._lock(sha)
        try:
            if not lock.exclusive(wait=False):
                raise RefError(f"worktree {self.path_for(sha)}: in use by another process")
            present = any(p.exists() or p.is_symlink() for p in (self.path_for(sha), self.state_dir_for(sha)))
            self._discard(sha)
            return present
        finally:
            self.release(sha)

    def clean(self) -> list[str]:
        """Remove every cached worktree of this repository not in use elsewhere; the removed shas.

        Lock files stay (removing one another process may hold would break the locking).
        """
        names = {p.name.split(".")[0] for p in self.root.iterdir()} if self.root.is_dir() else set()
        removed = []
        for sha in sorted(n for n in names if SHA.fullmatch(n)):
            try:
                if self.remove(sha):
                    removed.append(sha)
            except RefError:
                continue
        self.prune()
        return removed
