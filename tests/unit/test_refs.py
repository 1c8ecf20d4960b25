"""harness/refs/ on generated git repositories: refs, worktree cache, env templates, builds, ranges."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gitrepo import BUILD_CMD, BUILD_STAMP, EPOCH, commit_files, git, init_repo, make_kernel_repo
from harness import refs
from harness.refs import (BuildResult, Commit, RefError, Worktrees, build, commits_between, expand_env,
                          parse_ref_arg, parse_ref_args, ref_provenance, resolve, with_defaults)
from helpers import ROOT


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """Six commits; commit 1's build fails.  Read-only for the tests that share it."""
    info = make_kernel_repo(tmp_path_factory.mktemp("kpkg") / "kpkg", n_commits=6, culprit=3, broken_build=1)
    git(info.path, "tag", "v0.1", info.shas[2])
    git(info.path, "tag", "-a", "-m", "release 0.2", "v0.2", info.shas[4], when=EPOCH)
    git(info.path, "branch", "stable", info.shas[3])
    return info


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "wt-cache"


# -- parsing -----------------------------------------------------------------------

def test_parse_ref_arg():
    assert parse_ref_arg("fix=abc123") == ("fix", "abc123")
    assert parse_ref_arg("v0.1") == ("v0.1", "v0.1")
    assert parse_ref_arg("pr=fork/feature-x") == ("pr", "fork/feature-x")
    assert parse_ref_arg("up=HEAD~2") == ("up", "HEAD~2")
    assert parse_ref_args(["base=main", "fix=fork/fix", "v0.1"]) == [
        ("base", "main"), ("fix", "fork/fix"), ("v0.1", "v0.1")]


@pytest.mark.parametrize("arg, needle", [
    ("-x", "starts with '-'"),
    ("--upload-pack=touch /tmp/pwned", "starts with '-'"),
    ("fix=--upload-pack=evil", "revision --upload-pack=evil starts with '-'"),
    ("fix=-x", "starts with '-'"),
    ("", "empty name"),
    ("=HEAD", "empty name"),
    ("fix=", "empty revision"),
    ("fix=a b", "whitespace or control"),
    ("fix=a\tb", "whitespace or control"),
    ("fix=HEAD\n", "whitespace or control"),
    ("na me=HEAD", "whitespace or control"),
    ("fix=a\x1bb", "whitespace or control"),
])
def test_parse_refuses_bad_refs_with_one_line(arg, needle):
    with pytest.raises(RefError) as err:
        parse_ref_arg(arg)
    msg = str(err.value)
    assert needle in msg and msg.startswith("--ref ") and "\n" not in msg


def test_parse_refuses_duplicate_names():
    with pytest.raises(RefError, match=r"--ref fix=main: name fix already used by --ref fix=HEAD~1"):
        parse_ref_args(["fix=HEAD~1", "base=HEAD~3", "fix=main"])
    with pytest.raises(RefError, match="name main already used"):
        parse_ref_args(["main", "main=HEAD"])


# -- resolve -----------------------------------------------------------------------

def test_resolve_sha_short_branch_tag(repo):
    full = resolve(repo.path, repo.shas[2])
    assert isinstance(full, Commit) and full.sha == repo.shas[2]
    assert full.subject == "kpkg 0.0.2: housekeeping"
    assert full.author_date == "2024-01-01T00:02:00+00:00" and full.author == "Kernel Dev <dev@kpkg.invalid>"
    assert resolve(repo.path, repo.shas[2][:9]) == full
    assert resolve(repo.path, "v0.1") == full                         # lightweight tag
    assert resolve(repo.path, "v0.2").sha == repo.shas[4]             # annotated tag → its commit
    assert resolve(repo.path, "refs/tags/v0.2").sha == repo.shas[4]
    assert resolve(repo.path, "stable").sha == repo.shas[3]
    assert resolve(repo.path, "main").sha == repo.head
    assert resolve(repo.path, "main~5").sha == repo.shas[0]
    assert resolve(repo.path / "python" / "kpkg", "HEAD").sha == repo.head   # a subdirectory names its repo


def test_resolve_remote_ref_of_a_fork(tmp_path, repo):
    fork = tmp_path / "fork"
    git(tmp_path, "clone", "--quiet", str(repo.path), str(fork))
    git(fork, "checkout", "--quiet", "-b", "feature/fix", repo.shas[3])
    fix = commit_files(fork, {"python/kpkg/fixed.txt": "fixed\n"}, "kpkg: fix the torn head", 100)
    user = tmp_path / "user"
    git(tmp_path, "clone", "--quiet", str(repo.path), str(user))
    git(user, "remote", "add", "fork", str(fork))
    git(user, "fetch", "--quiet", "fork")
    assert resolve(user, "fork/feature/fix").sha == fix
    assert resolve(user, "refs/remotes/fork/feature/fix").subject == "kpkg: fix the torn head"
    assert resolve(user, "origin/main").sha == repo.head


def test_resolve_errors_name_the_ref_and_the_repo(tmp_path, repo):
    with pytest.raises(RefError) as err:
        resolve(repo.path, "abc123", name="fix")
    assert str(err.value) == f"--ref fix=abc123: not a commit in {repo.path}"
    with pytest.raises(RefError, match=r"^--ref no-such-branch: not a commit in "):
        resolve(repo.path, "no-such-branch")
    with pytest.raises(RefError, match="not a commit"):
        resolve(repo.path, "HEAD:build.sh")                              # a blob, not a commit
    with pytest.raises(RefError, match="not a revision"):
        resolve(repo.path, "--output=/tmp/x")
    with pytest.raises(RefError, match="not a git repository"):
        resolve(tmp_path, "HEAD")
    with pytest.raises(RefError, match="no such directory"):
        resolve(tmp_path / "missing", "HEAD")


# -- worktrees ---------------------------------------------------------------------

def test_worktree_materialised_reused_and_recreated(repo, cache):
    with Worktrees(repo.path, cache) as wts:
        assert wts.root.parent == cache.resolve() and wts.root.name.startswith("kpkg-")
        wt = wts.materialize(resolve(repo.path, "v0.1"))
        assert not wt.reused and wt.path == wts.root / repo.shas[2]
        assert git(wt.path, "rev-parse", "HEAD") == repo.shas[2]
        assert (wt.path / "python" / "kpkg" / "kernel.py").is_file()
        assert subprocess.run(["git", "symbolic-ref", "-q", "HEAD"], cwd=wt.path, timeout=30,
                              check=False).returncode == 1

        marker = wt.path / "untracked-marker"
        marker.write_text("still here")
        inode = wt.path.stat().st_ino
        again = wts.materialize(repo.shas[2])
        assert again.reused and marker.read_text() == "still here" and wt.path.stat().st_ino == inode

        (wt.path / "build.sh").write_text("echo tampered\n")          # a tracked file changed
        fresh = wts.materialize(repo.shas[2])
        assert not fresh.reused and not marker.exists()
        assert "tampered" not in (wt.path / "build.sh").read_text()

        (wt.path / ".git").unlink()                                     # no longer a worktree
        assert not wts.materialize(repo.shas[2]).reused
        git(wt.path, "checkout", "--quiet", "--detach", repo.shas[1])  # moved to another commit
        assert not wts.materialize(repo.shas[2]).reused
        wts.release(repo.shas[2])
        shutil.rmtree(wt.path)                                          # gone, still registered in git
        assert not wts.materialize(repo.shas[2]).reused
        assert wts.intact(repo.shas[2])
        assert wts.cached() == [repo.shas[2]]


def test_materialize_wants_a_full_sha(repo, cache):
    with Worktrees(repo.path, cache) as wts:
        with pytest.raises(RefError, match="expected a full commit sha"):
            wts.materialize("main")
        with pytest.raises(RefError, match="expected a full commit sha"):
            wts.materialize(repo.head[:12])


def test_cache_location_default_and_refusal(repo, tmp_path):
    wts = Worktrees(repo.path, env={"HARNESS_WORKTREE_CACHE": str(tmp_path / "c")})
    digest = hashlib.sha256(str(repo.path.resolve()).encode()).hexdigest()[:10]
    assert wts.root == (tmp_path / "c").resolve() / f"kpkg-{digest}"
    home = Worktrees(repo.path, env={})
    assert home.root.parent == Path("~/.cache/harness/worktrees").expanduser().resolve()
    with pytest.raises(RefError, match="inside the working tree"):
        Worktrees(repo.path, repo.path / ".cache")


def _snapshot(path: Path) -> dict:
    def g(*args):
        return subprocess.run(["git", *args], cwd=path, capture_output=True, text=True, timeout=30, check=False,
                              env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"}).stdout
    return {
        "status": g("status", "--porcelain=v1", "-uall", "--branch"),
        "head": g("rev-parse", "HEAD"), "symbolic": g("symbolic-ref", "HEAD"),
        "branches": g("for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", "refs/tags"),
        "stash": g("stash", "list", "--format=%H %s"),
        "index": (path / ".git" / "index").read_bytes(),
        "files": {p: (path / p).read_text() for p in ("build.sh", "CHANGELOG.md", "scratch.txt")},
    }


def test_users_checkout_is_never_touched(tmp_path, cache):
    info = make_kernel_repo(tmp_path / "user", n_commits=4)
    user = info.path
    git(user, "checkout", "--quiet", "-b", "wip", info.shas[2])
    (user / "CHANGELOG.md").write_text("stash me\n")
    git(user, "stash", "--quiet", when=EPOCH)
    (user / "build.sh").write_text("echo staged\n")
    git(user, "add", "build.sh")
    (user / "CHANGELOG.md").write_text("edited, not staged\n")
    (user / "scratch.txt").write_text("untracked\n")
    before = _snapshot(user)
    assert before["stash"] and "M  build.sh" in before["status"]

    with Worktrees(user, cache) as wts:
        for sha in (info.shas[0], info.head):
            wt = wts.materialize(sha)
            assert build(wt, BUILD_CMD, tmp_path / f"{sha}.log", None, 30).ok
        assert (wts.path_for(info.head) / "build.sh").read_text() != "echo staged\n"
        wts.materialize(info.head)
        assert _snapshot(user) == before
        wts.remove(info.shas[0])
        assert sorted(wts.clean()) == [info.head]
    assert _snapshot(user) == before
    assert str(cache) not in git(user, "worktree", "list")


_RACE = textwrap.dedent("""\
    import sys
    from harness.refs import Worktrees
    with Worktrees(sys.argv[1], sys.argv[2]) as wts:
        wt = wts.materialize(sys.argv[3])
        assert wts.intact(sys.argv[3])
        print("reused" if wt.reused else "created", wt.path)
    """)


def test_two_processes_materialise_one_sha(repo, cache):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _RACE, str(repo.path), str(cache), repo.head],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], outs
    words = sorted(out.split()[0] for out, _ in outs)
    assert words == ["created", "reused"] and len({out.split()[1] for out, _ in outs}) == 1
    with Worktrees(repo.path, cache) as wts:
        assert wts.materialize(repo.head).reused
        assert git(repo.path, "worktree", "list").count(str(wts.path_for(repo.head))) == 1


def test_worktree_in_use_is_not_removed(repo, cache):
    with Worktrees(repo.path, cache) as user, Worktrees(repo.path, cache) as other:
        wt = user.materialize(repo.shas[5])
        with pytest.raises(RefError, match="in use by another process"):
            other.remove(repo.shas[5])
        assert other.clean() == [] and wt.path.is_dir()
        user.release(repo.shas[5])
        assert other.clean() == [repo.shas[5]] and not wt.path.exists()
        assert str(wt.path) not in git(repo.path, "worktree", "list")
        assert other.remove(repo.shas[5]) is False


def test_damaged_worktree_in_use_elsewhere_is_an_error_not_a_wait(repo, cache):
    with Worktrees(repo.path, cache) as user, Worktrees(repo.path, cache, lock_timeout_s=0) as other:
        wt = user.materialize(repo.shas[4])
        (wt.path / "CHANGELOG.md").write_text("damaged\n")
        with pytest.raises(RefError, match="damaged and in use by another process"):
            other.materialize(repo.shas[4])
        user.release(repo.shas[4])
        assert not other.materialize(repo.shas[4]).reused


# -- env templates -----------------------------------------------------------------

def expand(*templates, base=None, worktree="/wt/abc", sha="a" * 40, name="fix"):
    return expand_env(list(templates), worktree=worktree, sha=sha, name=name,
                      base_env={} if base is None else base)


def test_env_templates_expand_fields_and_variables():
    env = expand("PYTHONPATH={worktree}/python:{PYTHONPATH}", "PYPTO_ROOT={worktree}", "TAG={name}@{sha}",
                 base={"PYTHONPATH": "/site", "HOME": "/home/u"})
    assert env == {"PYTHONPATH": "/wt/abc/python:/site", "PYPTO_ROOT": "/wt/abc", "TAG": "fix@" + "a" * 40}
    assert expand("LD_LIBRARY_PATH={worktree}/lib:{LD_LIBRARY_PATH}", "OPT={HOME}/x", base={"HOME": "/h"}) == {
        "LD_LIBRARY_PATH": "/wt/abc/lib", "OPT": "/h/x"}
    # earlier templates are visible to later ones; lower-case variables that exist are fine
    assert expand("A={worktree}", "B={A}/b", "C={lower}", base={"lower": "x"}) == {
        "A": "/wt/abc", "B": "/wt/abc/b", "C": "x"}


@pytest.mark.parametrize("base", [{}, {"PYTHONPATH": ""}, {"PYTHONPATH": ":"}])
def test_env_empty_pythonpath_leaves_no_empty_element(base):
    assert expand("PYTHONPATH={PYTHONPATH}:{worktree}/python:", base=base) == {"PYTHONPATH": "/wt/abc/python"}
    assert expand("PATH={PATH}", base=base) == {"PATH": ""}
    assert expand("NOT_A_LIST=:{UNSET}:", base=base) == {"NOT_A_LIST": "::"}


def test_env_literal_braces():
    assert expand("JSON={{\"root\": \"{worktree}\"}}") == {"JSON": '{"root": "/wt/abc"}'}
    assert expand("X={{sha}}") == {"X": "{sha}"}


@pytest.mark.parametrize("template, needle", [
    ("PYTHONPATH={wt}/python", "--env PYTHONPATH={wt}/python: unknown placeholder {wt}"),
    ("X={}", "unknown placeholder {}"),
    ("X={worktree", "unmatched '{'"),
    ("X=a}b", "unmatched '}'"),
    ("PYTHONPATH", "--env PYTHONPATH: expected KEY=VALUE"),
    ("=value", "is not a variable name"),
    ("1X=value", "is not a variable name"),
    ("A B=value", "is not a variable name"),
])
def test_env_bad_templates(template, needle):
    with pytest.raises(RefError) as err:
        expand(template)
    assert needle in str(err.value)


def test_env_given_templates_add_to_the_defaults_and_replace_only_what_they_set():
    defaults = ("PYTHONPATH={worktree}:{PYTHONPATH}", "KROOT={worktree}")
    # the bug: one --env dropped the default PYTHONPATH
    assert with_defaults(defaults, ["FOO=1"]) == (*defaults, "FOO=1")
    assert expand(*with_defaults(defaults, ["FOO=1"]), base={"PYTHONPATH": "/site"}) == {
        "PYTHONPATH": "/wt/abc:/site", "KROOT": "/wt/abc", "FOO": "1"}
    replaced = with_defaults(defaults, ["PYTHONPATH={worktree}/python:{PYTHONPATH}"])
    assert replaced == ("KROOT={worktree}", "PYTHONPATH={worktree}/python:{PYTHONPATH}")
    assert expand(*replaced, base={"PYTHONPATH": "/site"})["PYTHONPATH"] == "/wt/abc/python:/site"
    assert with_defaults(defaults, []) == defaults


# -- build -------------------------------------------------------------------------

def test_build_once_per_worktree_and_command(repo, cache, tmp_path):
    with Worktrees(repo.path, cache) as wts:
        wt = wts.materialize(repo.shas[2])
        first = build(wt, BUILD_CMD, tmp_path / "logs" / "b1.log", None, 30)
        assert first == BuildResult(ok=True, returncode=0, log_path=tmp_path / "logs" / "b1.log",
                                    duration_s=first.duration_s)
        second = build(wts.materialize(repo.shas[2]), BUILD_CMD, tmp_path / "logs" / "b2.log", None, 30)
        assert second.ok and second.cached
        assert "build cached" in second.log_path.read_text() and "b1.log" in second.log_path.read_text()
        assert (wt.path / BUILD_STAMP).read_text() == "built\n"           # ran once
        other = build(wt, "sh build.sh && echo again", tmp_path / "b3.log", None, 30)
        assert other.ok and not other.cached and "again" in other.log_path.read_text()
        assert (wt.path / BUILD_STAMP).read_text() == "built\nbuilt\n"

        (wt.path / "build.sh").write_text("exit 9\n")                      # damaged: re-created, re-built
        assert not wts.materialize(repo.shas[2]).reused
        again = build(wt, BUILD_CMD, tmp_path / "b4.log", None, 30)
        assert again.ok and not again.cached and (wt.path / BUILD_STAMP).read_text() == "built\n"

        assert not build(wt.path, BUILD_CMD, tmp_path / "b5.log", None, 30).cached   # a plain path: always


def test_build_failure_is_kept_in_the_log_and_retried(repo, cache, tmp_path):
    with Worktrees(repo.path, cache) as wts:
        wt = wts.materialize(repo.broken_build_sha)
        for attempt in range(2):
            result = build(wt, BUILD_CMD, tmp_path / f"fail{attempt}.log", None, 30)
            assert (result.ok, result.returncode, result.cached, result.timed_out) == (False, 3, False, False)
            log = result.log_path.read_text()
            assert "missing header kpkg_ops.h" in log and "exit status 3" in log


def test_build_timeout_kills_the_build(tmp_path):
    result = build(tmp_path, "echo started; sleep 60; echo never", tmp_path / "t.log", None, 0.5)
    assert (result.ok, result.returncode, result.timed_out) == (False, None, True)
    log = result.log_path.read_text()
    assert "started" in log.splitlines() and "never" not in log.splitlines() and "timed out" in log


def test_build_gets_the_environment(tmp_path):
    result = build(tmp_path, 'echo "root=$PYPTO_ROOT"', tmp_path / "e.log",
                   {"PATH": os.environ["PATH"], "PYPTO_ROOT": "/wt/x"}, 30)
    assert result.ok and "root=/wt/x" in result.log_path.read_text()


# -- ranges ------------------------------------------------------------------------

def test_commits_between_linear(repo):
    got = commits_between(repo.path, repo.shas[1], repo.shas[4])
    assert [c.sha for c in got] == repo.shas[2:5]
    assert got[0].subject == "kpkg 0.0.2: housekeeping"
    assert [c.sha for c in commits_between(repo.path, repo.shas[0], repo.head, first_parent=True)] == repo.shas[1:]
    assert commits_between(repo.path, repo.shas[3], repo.shas[3]) == []
    with pytest.raises(RefError, match=f"good {repo.shas[4][:12]} is not an ancestor of bad {repo.shas[1][:12]}"):
        commits_between(repo.path, repo.shas[4], repo.shas[1])
    with pytest.raises(RefError, match="expected a full commit sha"):
        commits_between(repo.path, "main~3", repo.head)


@pytest.fixture
def merged(tmp_path):
    """main: A - B - M - C, where M merges feat: A - F1 - F2."""
    path = init_repo(tmp_path / "merged")
    sha = {"A": commit_files(path, {"a.txt": "a\n"}, "A", 0)}
    git(path, "checkout", "--quiet", "-b", "feat")
    sha["F1"] = commit_files(path, {"f.txt": "1\n"}, "F1", 1)
    sha["F2"] = commit_files(path, {"f.txt": "2\n"}, "F2", 3)
    git(path, "checkout", "--quiet", "main")
    sha["B"] = commit_files(path, {"b.txt": "b\n"}, "B", 2)
    git(path, "merge", "--quiet", "--no-ff", "-m", "M", "feat", when=EPOCH + 60 * 4)
    sha["M"] = git(path, "rev-parse", "HEAD")
    sha["C"] = commit_files(path, {"c.txt": "c\n"}, "C", 5)
    return path, sha


def test_commits_between_with_merges(merged):
    path, sha = merged
    names = {v: k for k, v in sha.items()}

    def between(good, bad, first_parent=False):
        return [names[c.sha] for c in commits_between(path, sha[good], sha[bad], first_parent=first_parent)]

    every = between("A", "C")
    assert sorted(every) == ["B", "C", "F1", "F2", "M"]
    assert every.index("F1") < every.index("F2") < every.index("M") and every.index("B") < every.index("M")
    assert every[-1] == "C"
    assert between("A", "C", first_parent=True) == ["B", "M", "C"]
    assert between("F1", "C") == ["F2", "M", "C"]                   # only commits that contain good
    assert between("F1", "C", first_parent=True) == ["M", "C"]
    assert between("B", "C") == ["M", "C"]
    with pytest.raises(RefError, match="not an ancestor"):
        commits_between(path, sha["B"], sha["F2"])


# -- provenance --------------------------------------------------------------------

def test_ref_provenance(repo, tmp_path):
    commit = resolve(repo.path, "stable")
    doc = ref_provenance("base", commit)
    assert doc["name"] == "base" and doc["sha"] == repo.shas[3] and doc["build"] is None
    assert doc["subject"] == commit.subject and doc["author_date"] == "2024-01-01T00:03:00+00:00"
    result = BuildResult(ok=False, returncode=2, log_path=tmp_path / "b.log", duration_s=1.0)
    assert ref_provenance("base", commit, result, worktree="/wt")["build"] == {
        "ok": False, "log": str(tmp_path / "b.log"), "returncode": 2, "timed_out": False, "cached": False}
    assert refs.TEMPLATE_FIELDS == ("worktree", "sha", "name")

