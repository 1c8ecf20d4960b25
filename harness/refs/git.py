"""Kernel-library refs: parse ``--ref NAME=REV``, resolve to commits, check them out as cached worktrees.

A fix is tested by keeping the harness, goldens and cases fixed and switching only
the kernel library's checkout.  This module turns a user's revisions into
``Commit`` records, materialises each commit as a detached ``git worktree`` in a
cache directory outside the user's working tree (reused while intact), expands
``--env`` templates against a worktree, runs a build command at most once per
worktree and command, and lists the commits a bisect walks.

Nothing here touches the user's checkout, index, HEAD, branches or stash: every
git command that writes goes to a worktree of our own or to git's worktree
registry (``.git/worktrees/``).  Every error a user can cause is a ``RefError``
with one line that names the bad input (the CLI maps it to exit 2).

The cache (``Worktrees.root``; docs/refs.md)::

    <root>/<sha>/          the detached worktree
    <root>/<sha>.lock      flock: shared while in use, exclusive to create or remove
    <root>/<sha>.state/    build markers (one per build command) and the build lock
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.files import write_text
from harness.processes import terminate

CACHE_ENV = "HARNESS_WORKTREE_CACHE"
DEFAULT_CACHE = Path("~/.cache/harness/worktrees")
TEMPLATE_FIELDS = ("worktree", "sha", "name")

_GIT_TIMEOUT_S = 300.0
_LOCK_POLL_S = (0.02, 0.1)       # jittered wait between tries for an exclusive lock
_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_LIKE = re.compile(r"[A-Z_][A-Z0-9_]*")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
# Variables that point git somewhere else than the repository we were given.
_GIT_LOCATION_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                      "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE",
                      "GIT_PREFIX", "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM")
_FORMAT = "%H%x00%s%x00%aI%x00%an <%ae>%x00"


class RefError(UsageError):
    """A bad ref, repository, template or cache: one line naming the bad input."""


@dataclass(frozen=True)
class Commit:
    sha: str            # full hex
    subject: str
    author_date: str    # strict ISO 8601, with the author's offset
    author: str         # "Name <email>"

    @property
    def short(self) -> str:
        return self.sha[:12]


@dataclass(frozen=True)
class Worktree:
    """A materialised commit: the checkout and the directory holding its build markers."""

    sha: str
    path: Path
    state_dir: Path
    reused: bool        # False: checked out by this call


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    returncode: int | None       # None: timed out (the process group was killed)
    log_path: Path
    duration_s: float
    timed_out: bool = False
    cached: bool = False         # a marker said this worktree was already built with this command


# -- parsing ---------------------------------------------------------------------

def _show(text: str) -> str:
    """``text`` as it may appear in a one-line message (repr when it holds odd characters)."""
    return text if text.isprintable() and text.strip() == text and text else repr(text)


def _check_part(arg: str, what: str, value: str) -> None:
    if not value:
        raise RefError(f"--ref {_show(arg)}: empty {what}")
    if value.startswith("-"):
        raise RefError(f"--ref {_show(arg)}: {what} {_show(value)} starts with '-'")
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        raise RefError(f"--ref {_show(arg)}: {what} {_show(value)} holds whitespace or control characters")


def parse_ref_arg(arg: str) -> tuple[str, str]:
    """``"NAME=REV"`` → ``(name, rev)``; a bare ``"REV"`` is named after itself."""
    name, sep, rev = arg.partition("=")
    if not sep:
        name = rev = arg
    _check_part(arg, "name", name)
    _check_part(arg, "revision", rev)
    return name, rev


def parse_ref_args(args: Iterable[str]) -> list[tuple[str, str]]:
    """Every ``--ref`` in order; names must be unique."""
    refs: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for arg in args:
        name, rev = parse_ref_arg(arg)
        if name in seen:
            raise RefError(f"--ref {_show(arg)}: name {_show(name)} already used by --ref {_show(seen[name])}")
        seen[name] = arg
        refs.append((name, rev))
    return refs


# -- git -------------------------------------------------------------------------

def _git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS}
    # Read-only commands (status) must not refresh and rewrite anyone's index.
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    env.update(extra or {})
    return env


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(["git", "-c", "log.showSignature=false", "-c", "color.ui=false", *args],
                              cwd=cwd, env=_git_env(), capture_output=True, stdin=subprocess.DEVNULL,
                              timeout=_GIT_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise RefError("git: not found on PATH") from None
    except subprocess.TimeoutExpired:
        raise RefError(f"git {' '.join(args[:2])} in {cwd}: no answer after {_GIT_TIMEOUT_S:.0f} s") from None
    if check and proc.returncode != 0:
        raise RefError(f"git {' '.join(args[:2])} in {cwd}: {_first_line(proc.stderr)}")
    return proc


def _out(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout.decode("utf-8", errors="replace")


def _first_line(raw: bytes) -> str:
    lines = [ln.strip() for ln in raw.decode("utf-8", errors="replace").splitlines() if ln.strip()]
    return lines[0] if lines else "failed"


@dataclass(frozen=True)
class _Repo:
    path: Path          # the working tree's top, or the git directory of a bare repository
    common_dir: Path    # the git directory shared by every worktree
    bare: bool


def _open_repo(repo: str | os.PathLike[str]) -> _Repo:
    path = Path(repo).expanduser()
    if not path.is_dir():
        raise RefError(f"--repo {path}: no such directory")
    path = path.resolve()
    proc = _git(path, "rev-parse", "--is-bare-repository", "--path-format=absolute", "--git-common-dir",
                check=False)
    lines = _out(proc).splitlines()
    if proc.returncode != 0 or len(lines) != 2:
        raise RefError(f"--repo {path}: not a git repository")
    bare = lines[0].strip() == "true"
    common = Path(lines[1].strip()).resolve()
    if bare:
        return _Repo(common, common, True)
    top = _git(path, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0:
        raise RefError(f"--repo {path}: inside a git directory, not a working tree")
    return _Repo(Path(_out(top).strip()).resolve(), common, False)


def _sha_of(value: Commit | str, what: str) -> str:
    sha = value.sha if isinstance(value, Commit) else value
    if not _SHA.fullmatch(sha):
        raise RefError(f"{what} {_show(sha)}: expected a full commit sha (resolve the revision first)")
    return sha


def _parse_log(text: str) -> list[Commit]:
    fields = text.split("\x00")
    commits = []
    for i in range(0, len(fields) - 3, 4):
        sha, subject, date, author = (f.strip("\n") for f in fields[i:i + 4])
        commits.append(Commit(sha.strip(), subject, date, author))
    return commits


def _commit_info(repo: _Repo, sha: str) -> Commit:
    commits = _parse_log(_out(_git(repo.path, "log", "-1", "--no-walk", f"--format={_FORMAT}", sha)))
    if len(commits) != 1:
        raise RefError(f"{sha}: no commit information in {repo.path}")
    return commits[0]


def resolve(repo: str | os.PathLike[str], rev: str, *, name: str | None = None) -> Commit:
    """The commit ``rev`` names in ``repo`` (sha, short sha, branch, tag, ``fork/branch``, ``refs/...``)."""
    label = f"--ref {_show(rev) if name in (None, rev) else _show(f'{name}={rev}')}"
    if not rev or rev.startswith("-") or any(ch.isspace() or not ch.isprintable() for ch in rev):
        raise RefError(f"{label}: not a revision")
    r = _open_repo(repo)
    proc = _git(r.path, "rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}", check=False)
    sha = _out(proc).strip()
    if proc.returncode != 0 or not _SHA.fullmatch(sha):
        why = " (ambiguous short sha)" if b"ambiguous" in proc.stderr else ""
        raise RefError(f"{label}: not a commit in {r.path}{why}")
    return _commit_info(r, sha)


def is_ancestor(repo: str | os.PathLike[str], older: Commit | str, newer: Commit | str) -> bool:
    r = _open_repo(repo)
    proc = _git(r.path, "merge-base", "--is-ancestor", _sha_of(older, "good"), _sha_of(newer, "bad"),
                check=False)
    if proc.returncode not in (0, 1):
        raise RefError(f"git merge-base in {r.path}: {_first_line(proc.stderr)}")
    return proc.returncode == 0


def commits_between(repo: str | os.PathLike[str], good: Commit | str, bad: Commit | str,
                    first_parent: bool = False) -> list[Commit]:
    """The commits in ``(good, bad]`` that contain ``good``, oldest first, parents before children.

    ``first_parent``: only bad's first-parent chain (the merges of a mainline, not the
    commits of the branches they merged).  ``good == bad`` gives ``[]``.
    """
    r = _open_repo(repo)
    good_sha, bad_sha = _sha_of(good, "good"), _sha_of(bad, "bad")
    if not is_ancestor(r.path, good_sha, bad_sha):
        raise RefError(f"good {good_sha[:12]} is not an ancestor of bad {bad_sha[:12]} in {r.path}: "
                       "no range to bisect")
    span = f"{good_sha}..{bad_sha}"
    commits = _parse_log(_out(_git(r.path, "log", "--reverse", "--topo-order", "--ancestry-path",
                                   f"--format={_FORMAT}", span)))
    if first_parent:
        # --first-parent with --ancestry-path finds nothing when good sits on a merged
        # branch: walk the first-parent chain, keep the commits that contain good.
        chain = _out(_git(r.path, "rev-list", "--reverse", "--topo-order", "--first-parent", span)).split()
        by_sha = {c.sha: c for c in commits}
        commits = [by_sha[s] for s in chain if s in by_sha]
    return commits


# -- the worktree cache ----------------------------------------------------------

def default_cache_root(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def repo_cache_dir(repo_path: Path, base: Path) -> Path:
    """``<base>/<repo-name>-<hash of the repo's absolute path>``: one directory per repository."""
    digest = hashlib.sha256(str(repo_path).encode()).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", repo_path.name.removesuffix(".git")) or "repo"
    return base / f"{name}-{digest}"


class _Lock:
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
        self.repo = _open_repo(repo)
        base = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root(env)
        self.root = repo_cache_dir(self.repo.path, base.resolve())
        if not self.repo.bare and self.root.is_relative_to(self.repo.path):
            raise RefError(f"worktree cache {self.root}: inside the working tree of {self.repo.path}; "
                           f"choose a directory outside it (${CACHE_ENV})")
        self.lock_timeout_s = lock_timeout_s
        self._held: dict[str, _Lock] = {}

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

    def _lock(self, sha: str) -> _Lock:
        if sha not in self._held:
            self._held[sha] = _Lock(self.root / f"{sha}.lock")
        return self._held[sha]

    def cached(self) -> list[str]:
        """The shas with a checkout directory in the cache (intact or not)."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and _SHA.fullmatch(p.name))

    # -- materialise -------------------------------------------------------------
    def intact(self, sha: str) -> bool:
        """The checkout exists, belongs to this repository, sits at ``sha`` and has no tracked change."""
        path = self.path_for(sha)
        if not (path / ".git").exists():
            return False
        proc = _git(path, "rev-parse", "HEAD", "--path-format=absolute", "--show-toplevel", "--git-common-dir",
                    check=False)
        lines = _out(proc).splitlines()
        if proc.returncode != 0 or len(lines) != 3 or lines[0].strip() != sha:
            return False
        if Path(lines[1].strip()).resolve() != path or Path(lines[2].strip()).resolve() != self.repo.common_dir:
            return False
        status = _git(path, "status", "--porcelain", "--untracked-files=no", "--ignore-submodules=none",
                      check=False)
        return status.returncode == 0 and not status.stdout.strip()

    def materialize(self, commit: Commit | str) -> Worktree:
        sha = _sha_of(commit, "commit")
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
        listing = _out(_git(self.repo.path, "worktree", "list", "--porcelain"))
        return any(line == f"worktree {path}" for line in listing.splitlines())

    def _discard(self, sha: str) -> None:
        """Remove the checkout, its registration and its build markers (caller holds the exclusive lock)."""
        path = self.path_for(sha)
        if self._registered(path):
            _git(self.repo.path, "worktree", "remove", "--force", "--force", str(path), check=False)
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
        _git(self.repo.path, "worktree", "add", "--detach", "--quiet", str(path), sha)
        if not self.intact(sha):
            raise RefError(f"worktree {path}: checked out {sha[:12]} but it does not verify")

    # -- removal -----------------------------------------------------------------
    def prune(self) -> None:
        """Drop git's registrations of worktrees whose directories are gone (``git worktree prune``)."""
        _git(self.repo.path, "worktree", "prune")

    def remove(self, sha: str) -> bool:
        """Remove one cached worktree and its build markers; False when there was nothing to remove.

        RefError when another process (or another ``Worktrees``) is using it.
        """
        sha = _sha_of(sha, "commit")
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
        for sha in sorted(n for n in names if _SHA.fullmatch(n)):
            try:
                if self.remove(sha):
                    removed.append(sha)
            except RefError:
                continue
        self.prune()
        return removed

    # -- build -------------------------------------------------------------------
    def build(self, worktree: Worktree, cmd: str, log_path: str | os.PathLike[str],
              env: Mapping[str, str] | None, timeout_s: float) -> BuildResult:
        return build(worktree, cmd, log_path, env, timeout_s)


# -- env templates -----------------------------------------------------------------

def _path_like(key: str) -> bool:
    return key.upper().endswith("PATH")


def _expand(template: str, value: str, fields: Mapping[str, str], env: Mapping[str, str]) -> str:
    def one(m: re.Match) -> str:
        token = m.group(0)
        if token in ("{{", "}}"):
            return token[0]
        if m.group(1) is None:
            raise RefError(f"--env {_show(template)}: unmatched {token!r} (write {token * 2} for a literal one)")
        key = m.group(1)
        if key in fields:
            return fields[key]
        if key in env:
            return env[key]
        if _ENV_LIKE.fullmatch(key):
            return ""                         # an unset environment variable
        raise RefError(f"--env {_show(template)}: unknown placeholder {{{key}}} "
                       f"(fields: {', '.join(TEMPLATE_FIELDS)}; or an environment variable)")
    return _PLACEHOLDER.sub(one, value)


def expand_env(templates: Iterable[str], *, worktree: str | os.PathLike[str], sha: str, name: str,
               base_env: Mapping[str, str]) -> dict[str, str]:
    """The variables ``KEY=VALUE`` templates set for one ref (only those; merge over ``base_env``).

    Placeholders: ``{worktree}``, ``{sha}``, ``{name}``, then any variable of ``base_env``
    (as updated by the templates before this one).  An UPPER_CASE name that is unset
    expands to ""; any other unknown name is an error.  ``{{``/``}}`` are literal braces.
    In variables whose name ends in PATH, empty elements (a leading, trailing or doubled
    separator, which Python would read as the current directory) are dropped.
    """
    fields = {"worktree": str(worktree), "sha": sha, "name": name}
    env = dict(base_env)
    out: dict[str, str] = {}
    for template in templates:
        key, sep, value = template.partition("=")
        if not sep:
            raise RefError(f"--env {_show(template)}: expected KEY=VALUE")
        if not _ENV_KEY.fullmatch(key):
            raise RefError(f"--env {_show(template)}: {_show(key)} is not a variable name")
        expanded = _expand(template, value, fields, env)
        if _path_like(key):
            expanded = os.pathsep.join(p for p in expanded.split(os.pathsep) if p)
        env[key] = out[key] = expanded
    return out


# -- build -------------------------------------------------------------------------

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
    lock = _Lock(worktree.state_dir / "build.lock")
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


# -- provenance --------------------------------------------------------------------

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
