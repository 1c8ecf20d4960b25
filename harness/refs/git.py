"""Git plumbing for kernel-library refs: resolve revisions to ``Commit`` records, list ranges.

Nothing here touches the user's checkout, index, HEAD, branches or stash: every
git command runs with git's location variables cleared and optional locks off,
and those that write go to a worktree of our own or to git's worktree registry
(``.git/worktrees/``; ``harness.refs.worktrees``).
"""
from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.refs.spec import RefError, show

_GIT_TIMEOUT_S = 300.0
SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
# Variables that point git somewhere else than the repository we were given.
_GIT_LOCATION_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                      "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE",
                      "GIT_PREFIX", "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM")
_FORMAT = "%H%x00%s%x00%aI%x00%an <%ae>%x00"


@dataclass(frozen=True)
class Commit:
    sha: str            # full hex
    subject: str
    author_date: str    # strict ISO 8601, with the author's offset
    author: str         # "Name <email>"

    @property
    def short(self) -> str:
        return self.sha[:12]


def _git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS}
    # Read-only commands (status) must not refresh and rewrite anyone's index.
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    env.update(extra or {})
    return env


def run_git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
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


def text_of(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout.decode("utf-8", errors="replace")


def _first_line(raw: bytes) -> str:
    lines = [ln.strip() for ln in raw.decode("utf-8", errors="replace").splitlines() if ln.strip()]
    return lines[0] if lines else "failed"


@dataclass(frozen=True)
class Repo:
    path: Path          # the working tree's top, or the git directory of a bare repository
    common_dir: Path    # the git directory shared by every worktree
    bare: bool


def open_repo(repo: str | os.PathLike[str]) -> Repo:
    path = Path(repo).expanduser()
    if not path.is_dir():
        raise RefError(f"--repo {path}: no such directory")
    path = path.resolve()
    proc = run_git(path, "rev-parse", "--is-bare-repository", "--path-format=absolute", "--git-common-dir",
                check=False)
    lines = text_of(proc).splitlines()
    if proc.returncode != 0 or len(lines) != 2:
        raise RefError(f"--repo {path}: not a git repository")
    bare = lines[0].strip() == "true"
    common = Path(lines[1].strip()).resolve()
    if bare:
        return Repo(common, common, True)
    top = run_git(path, "rev-parse", "--show-toplevel", check=False)
    if top.returncode != 0:
        raise RefError(f"--repo {path}: inside a git directory, not a working tree")
    return Repo(Path(text_of(top).strip()).resolve(), common, False)


def sha_of(value: Commit | str, what: str) -> str:
    sha = value.sha if isinstance(value, Commit) else value
    if not SHA.fullmatch(sha):
        raise RefError(f"{what} {show(sha)}: expected a full commit sha (resolve the revision first)")
    return sha


def _parse_log(text: str) -> list[Commit]:
    fields = text.split("\x00")
    commits = []
    for i in range(0, len(fields) - 3, 4):
        sha, subject, date, author = (f.strip("\n") for f in fields[i:i + 4])
        commits.append(Commit(sha.strip(), subject, date, author))
    return commits


def _commit_info(repo: Repo, sha: str) -> Commit:
    commits = _parse_log(text_of(run_git(repo.path, "log", "-1", "--no-walk", f"--format={_FORMAT}", sha)))
    if len(commits) != 1:
        raise RefError(f"{sha}: no commit information in {repo.path}")
    return commits[0]


def resolve(repo: str | os.PathLike[str], rev: str, *, name: str | None = None) -> Commit:
    """The commit ``rev`` names in ``repo`` (sha, short sha, branch, tag, ``fork/branch``, ``refs/...``)."""
    label = f"--ref {show(rev) if name in (None, rev) else show(f'{name}={rev}')}"
    if not rev or rev.startswith("-") or any(ch.isspace() or not ch.isprintable() for ch in rev):
        raise RefError(f"{label}: not a revision")
    r = open_repo(repo)
    proc = run_git(r.path, "rev-parse", "--verify", "--end-of-options", f"{rev}^{{commit}}", check=False)
    sha = text_of(proc).strip()
    if proc.returncode != 0 or not SHA.fullmatch(sha):
        why = " (ambiguous short sha)" if b"ambiguous" in proc.stderr else ""
        raise RefError(f"{label}: not a commit in {r.path}{why}")
    return _commit_info(r, sha)


def is_ancestor(repo: str | os.PathLike[str], older: Commit | str, newer: Commit | str) -> bool:
    r = open_repo(repo)
    proc = run_git(r.path, "merge-base", "--is-ancestor", sha_of(older, "good"), sha_of(newer, "bad"),
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
    r = open_repo(repo)
    good_sha, bad_sha = sha_of(good, "good"), sha_of(bad, "bad")
    if not is_ancestor(r.path, good_sha, bad_sha):
        raise RefError(f"good {good_sha[:12]} is not an ancestor of bad {bad_sha[:12]} in {r.path}: "
                       "no range to bisect")
    span = f"{good_sha}..{bad_sha}"
    commits = _parse_log(text_of(run_git(r.path, "log", "--reverse", "--topo-order", "--ancestry-path",
                                   f"--format={_FORMAT}", span)))
    if first_parent:
        # --first-parent with --ancestry-path finds nothing when good sits on a merged
        # branch: walk the first-parent chain, keep the commits that contain good.
        chain = text_of(run_git(r.path, "rev-list", "--reverse", "--topo-order", "--first-parent", span)).split()
        by_sha = {c.sha: c for c in commits}
        commits = [by_sha[s] for s in chain if s in by_sha]
    return commits
