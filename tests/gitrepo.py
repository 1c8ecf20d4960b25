"""Generated kernel-library git repositories for tests (importable as `gitrepo`).

``make_kernel_repo(path, ...)`` writes a repository whose commits hold a small
package ``kpkg`` under ``python/`` (so a worker needs ``{worktree}/python`` on
its PYTHONPATH) with one kernel, ``kpkg.kernel:rope_kv_write``, that wraps the
harness's reference kernel.  From the culprit commit on, each call corrupts one
head of ``query`` with probability ``fail_p``, drawn from
``random.Random(f"{seed}:{call}")`` where ``seed`` is ``$KPKG_FLAKE_SEED`` (default:
the generator's ``seed``) and ``call`` counts the calls made in the process, or, with
``$KPKG_FLAKE_COUNTER`` naming a file, the calls made by every process (compare and
bisect start fresh workers per commit: a per-process count would replay the same
draws at every commit), so a run is reproducible.  Every commit changes something harmless (the version
string, a CHANGELOG line).  Optional: a commit whose ``build.sh`` fails (fixed by
the next one), a commit whose kernel raises (a failure other than the flake), and a
second flaky bug of another class entering at a later commit (``second``): from there each
call also draws, from ``Random(f"{seed}:second:{call}")``, whether it hangs (sleeps for an
hour: HANG, at the case's ``timeout_s``) or, as a fast stand-in for another failure class,
writes NaN into ``query`` (NONFINITE); a hang comes before the race can happen.

Names, dates and config are fixed, so the same arguments give the same shas.
"""
from __future__ import annotations

import os
import subprocess
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

KERNEL = "kpkg.kernel:rope_kv_write"
BUILD_CMD = "sh build.sh"
SEED_ENV = "KPKG_FLAKE_SEED"
BUILD_STAMP = "build-stamp.txt"      # build.sh appends a line per run (untracked)
RAISE_TEXT = "kpkg: unsupported query layout"
EPOCH = 1_704_067_200                # 2024-01-01T00:00:00Z
_IDENTITY = {"GIT_AUTHOR_NAME": "Kernel Dev", "GIT_AUTHOR_EMAIL": "dev@kpkg.invalid",
             "GIT_COMMITTER_NAME": "Kernel Dev", "GIT_COMMITTER_EMAIL": "dev@kpkg.invalid"}


def git_env(when: int | None = None) -> dict[str, str]:
    """An environment for git that ignores the user's and system's config (hooks, signing, ...)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(_IDENTITY, GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"{when} +0000"
    return env


def git(repo: Path, *args: str, when: int | None = None) -> str:
    """Run git in ``repo`` with the isolated environment; its stdout, stripped."""
    proc = subprocess.run(["git", *args], cwd=repo, env=git_env(when), capture_output=True, text=True,
                          timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {repo}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def init_repo(path: Path, branch: str = "main") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "--quiet", f"--initial-branch={branch}")
    return path


def commit_files(repo: Path, files: dict[str, str], message: str, index: int) -> str:
    """Write ``files`` (path → text), commit them all at date EPOCH + index minutes; the new sha."""
    for rel, text in files.items():
        target = repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, newline="\n")
    git(repo, "add", "--", *files)
    git(repo, "commit", "--quiet", "--no-verify", "--allow-empty", "-m", message, when=EPOCH + 60 * index)
    return git(repo, "rev-parse", "HEAD")


# -- the package's files, per commit -----------------------------------------------

def _init_py(version: str) -> str:
    return f'"""kpkg: a generated kernel library for the harness\'s tests."""\n__version__ = "{version}"\n'


_KERNEL_HEAD = '''\
"""kpkg kernels: rope_kv_write wrapping the harness's reference kernel."""
from __future__ import annotations

import os
import random

from harness.kernels import reference
from harness.kernels.reference import with_op_signature

SEED_ENV = "{seed_env}"
COUNTER_ENV = "KPKG_FLAKE_COUNTER"
DEFAULT_SEED = "{seed}"
FAIL_P = {fail_p!r}
FLAKY = {flaky!r}
RAISES = {raises!r}
SECOND = {second!r}                # the second bug's class from this commit on ("hang", "nonfinite"), else None
SECOND_P = {second_p!r}
_calls = 0


def flake_seed() -> str:
    return os.environ.get(SEED_ENV, DEFAULT_SEED)


def corrupts(call: int) -> bool:
    """Whether call number ``call`` of this process corrupts its output."""
    return FLAKY and random.Random(f"{{flake_seed()}}:{{call}}").random() < FAIL_P


def second_strikes(call: int) -> bool:
    """Whether call number ``call`` meets the second bug."""
    return SECOND is not None and random.Random(f"{{flake_seed()}}:second:{{call}}").random() < SECOND_P


def _next_call() -> int:
    """The call number: per process, or across processes through the counter file $KPKG_FLAKE_COUNTER
    (fresh workers per commit would otherwise all replay call 0's draw)."""
    global _calls
    path = os.environ.get(COUNTER_ENV)
    if not path:
        call, _calls = _calls, _calls + 1
        return call
    import fcntl
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        call = int(fh.read().strip() or 0)
        fh.seek(0)
        fh.truncate()
        fh.write(str(call + 1))
    return call


def _launch(op, args):
    call = _next_call()
    if RAISES:
        raise RuntimeError("{raise_text}")
    strikes = second_strikes(call)
    if strikes and SECOND == "hang":
        import time
        time.sleep(3600)                          # a deadlock: the harness's timeout ends it
    result = reference.rope_kv_write(**args)
    query = args["query"]                         # [rows, heads, D]
    if corrupts(call):
        query[:, call % query.shape[1]].fill_(3.0)
    if strikes and SECOND == "nonfinite":
        query[:, (call + 1) % query.shape[1]].fill_(float("nan"))
    return result


rope_kv_write = with_op_signature("rope_kv_write", _launch)
'''

_BUILD_OK = f'#!/bin/sh\n# build kpkg (nothing to compile; records that it ran)\necho built >> {BUILD_STAMP}\n'
_BUILD_BROKEN = '#!/bin/sh\necho "kpkg build: missing header kpkg_ops.h" >&2\nexit 3\n'


def case_yaml(name: str = "kpkg-rope", kernel: str = KERNEL, seed: int = 0) -> str:
    """A one-case matrix for the generated kernel, tiny enough to run well under a second on the CPU."""
    return textwrap.dedent(f"""\
        name: {name}
        op: rope_kv_write
        kernel: "{kernel}"
        geometry: tiny
        batch: 4
        seq_lens: "const(1)"
        slot_mode: arange
        seed: {seed}
        timeout_s: 120
        """)


@dataclass(frozen=True)
class RepoInfo:
    path: Path
    shas: list[str]                       # oldest first
    culprit: int | None                   # index of the first flaky commit
    broken_build: int | None              # index of the commit whose build.sh fails
    raises: int | None                    # index of the commit whose kernel raises
    fail_p: float
    seed: int
    second: int | None = None             # index of the first commit with the second bug
    second_kind: str | None = None        # "hang" or "nonfinite"
    second_p: float = 0.0
    kernel: str = KERNEL
    build_cmd: str = BUILD_CMD
    seed_env: str = SEED_ENV
    case_yaml: str = field(default_factory=case_yaml)

    @property
    def culprit_sha(self) -> str | None:
        return None if self.culprit is None else self.shas[self.culprit]

    @property
    def broken_build_sha(self) -> str | None:
        return None if self.broken_build is None else self.shas[self.broken_build]

    @property
    def raises_sha(self) -> str | None:
        return None if self.raises is None else self.shas[self.raises]

    @property
    def second_sha(self) -> str | None:
        return None if self.second is None else self.shas[self.second]

    @property
    def head(self) -> str:
        return self.shas[-1]


SECOND_KINDS = ("hang", "nonfinite")


def make_kernel_repo(path: str | os.PathLike[str], n_commits: int = 32, culprit: int | None = None,
                     fail_p: float = 0.5, broken_build: int | None = None, raises: int | None = None,
                     seed: int = 0, second: int | None = None, second_kind: str = "nonfinite",
                     second_p: float = 0.5) -> RepoInfo:
    """A repository of ``n_commits`` commits on ``main`` (see the module docstring)."""
    if n_commits < 1:
        raise ValueError("n_commits must be >= 1")
    if second_kind not in SECOND_KINDS:
        raise ValueError(f"second_kind={second_kind!r}: one of {', '.join(SECOND_KINDS)}")
    for what, index in (("culprit", culprit), ("broken_build", broken_build), ("raises", raises),
                        ("second", second)):
        if index is not None and not 0 <= index < n_commits:
            raise ValueError(f"{what}={index}: outside 0..{n_commits - 1}")
    repo = init_repo(Path(path))
    changelog = ["# kpkg changelog", ""]
    shas: list[str] = []
    for i in range(n_commits):
        flaky = culprit is not None and i >= culprit
        is_raise = raises is not None and i == raises
        second_here = second_kind if second is not None and i >= second else None
        version = f"0.{seed}.{i}"
        changelog.append(f"- {version}: " + ("reorder query tiles" if i == culprit
                                              else "overlap the cache write" if i == second else f"housekeeping {i}"))
        files = {
            "python/kpkg/__init__.py": _init_py(version),
            "python/kpkg/kernel.py": _KERNEL_HEAD.format(seed_env=SEED_ENV, seed=seed, fail_p=float(fail_p),
                                                         flaky=flaky, raises=is_raise, raise_text=RAISE_TEXT,
                                                         second=second_here, second_p=float(second_p)),
            "build.sh": _BUILD_BROKEN if i == broken_build else _BUILD_OK,
            "CHANGELOG.md": "\n".join(changelog) + "\n",
        }
        if i == 0:
            files[".gitignore"] = f"{BUILD_STAMP}\n__pycache__/\n"
        subject = ("kpkg: reorder query tiles for the fused write" if i == culprit
                   else "kpkg: overlap the cache write with the next tile" if i == second
                   else "build: require kpkg_ops.h" if i == broken_build
                   else "kernel: strict query layout" if is_raise
                   else f"kpkg {version}: housekeeping")
        shas.append(commit_files(repo, files, subject, i))
    return RepoInfo(path=repo, shas=shas, culprit=culprit, broken_build=broken_build, raises=raises,
                    fail_p=float(fail_p), seed=seed, second=second,
                    second_kind=None if second is None else second_kind, second_p=float(second_p))


# -- a kernel library whose kernel becomes slower at one commit (latency tests, bench/) --------

LATENCY_KERNEL = "lpkg.kernel:paged_decode_attention"
LATENCY_KERNEL_PY = '''\
"""lpkg: paged decode attention (the harness's reference) after a fixed amount of host work.

The work is a loop of a fixed number of integer steps, not a sleep: a sleep measures the
scheduler, a loop of fixed work costs the same in every call, up to the machine's noise."""
from harness.kernels.reference import paged_decode_attention as _reference

WORK = {work}


def _spin(n):
    acc = 0
    for i in range(n):
        acc += i * i
    return acc


def paged_decode_attention(**args):
    _spin(WORK)
    return _reference(**args)
'''


def latency_case_yaml(name: str = "lpkg-decode", budget_s: float = 0.3) -> str:
    """One timed case of the generated kernel (tiny geometry, a few ms a call)."""
    return textwrap.dedent(f"""\
        name: {name}
        op: paged_decode_attention
        kernel: "{LATENCY_KERNEL}"
        geometry: tiny
        batch: 2
        seq_lens: "const(40)"
        slot_mode: arange
        seed: 7
        timeout_s: 120
        latency: {{budget_s: {budget_s}, warmup_s: 0.05}}
        """)


def make_latency_repo(path: str | os.PathLike[str], n_commits: int = 8, slow_from: int | None = 5,
                      work: int = 30_000, slow_factor: float = 1.4) -> list[str]:
    """A repository of ``n_commits`` whose kernel does ``work`` loop steps per call, ``work *
    slow_factor`` from commit ``slow_from`` on; every commit also changes a harmless line.
    The shas, oldest first."""
    repo = init_repo(Path(path))
    shas = []
    for i in range(n_commits):
        slow = slow_from is not None and i >= slow_from
        files = {"lpkg/__init__.py": f'__version__ = "0.{i}"\n',
                 "lpkg/kernel.py": LATENCY_KERNEL_PY.format(work=int(work * slow_factor) if slow else work)}
        subject = "make the kernel slower (more work per call)" if i == slow_from else f"tidy: release 0.{i}"
        shas.append(commit_files(repo, files, subject, i))
    return shas


# -- a kernel library holding its own TensorSpec module (spec ops across refs: tests/e2e/test_spec_refs_cli.py) --

SPEC_MODULE = "slib.spec_scale"
SPEC_KERNEL = "slib.kernels:scale_rows"
_SPEC_PY = '''\
"""slib's test of scale_rows, as the library writes it: y = x * w, row by row."""
from dataclasses import dataclass

import torch


@dataclass
class TensorSpec:
    name: str
    shape: list
    dtype: torch.dtype
    init_value: object = None
    is_output: bool = False


def build_tensor_specs(rows=4, cols=64):
    return [TensorSpec("x", [rows, cols], torch.float32, init_value=lambda: torch.randn(rows, cols)),
            TensorSpec("w", [cols], torch.float32, init_value=lambda: torch.rand(cols) + 0.5),
            TensorSpec("y", [rows, cols], torch.float32, is_output=True)]


def golden_scale_rows(tensors):
    tensors["y"][:] = tensors["x"] * tensors["w"]
'''
_SPEC_KERNELS_PY = '''\
"""slib kernels (release {version})."""
BUGGY = {buggy!r}
_calls = 0


def scale_rows(x, w, y):
    y.copy_(x * w)
    if BUGGY:                    # "fuse the second row's epilogue": scales row 1 twice
        y[1].mul_(1.5)


def scale_jitter(x, w, y):
    """Correct within any tolerance, but its bits differ from call to call (a racy reduction's stand-in)."""
    global _calls
    _calls += 1
    y.copy_(x * w)
    y[0, 0].mul_(1 + 1e-6 * _calls)
'''


def spec_case_yaml(name: str = "scale", kernel: str = SPEC_KERNEL) -> str:
    return f"name: {name}\nspec: {SPEC_MODULE}\nkernel: {kernel}\nparams: {{rows: [4]}}\nseed: 0\ntimeout_s: 120\n"


def make_spec_repo(path: str | os.PathLike[str], n_commits: int = 6, culprit: int = 3) -> list[str]:
    """A library (package ``slib`` at the top of the checkout) whose ``slib.spec_scale`` TensorSpec
    module is the same at every commit and whose ``scale_rows`` kernel mis-scales row 1 from
    commit ``culprit`` on; every commit changes the release string.  The shas, oldest first."""
    repo = init_repo(Path(path))
    shas = []
    for i in range(n_commits):
        files = {"slib/__init__.py": f'__version__ = "0.{i}"\n', "slib/spec_scale.py": _SPEC_PY,
                 "slib/kernels.py": _SPEC_KERNELS_PY.format(version=f"0.{i}", buggy=i >= culprit)}
        if i == 0:
            files[".gitignore"] = "__pycache__/\n"
        subject = "kernels: fuse the second row's epilogue" if i == culprit else f"slib 0.{i}: housekeeping"
        shas.append(commit_files(repo, files, subject, i))
    return shas
