"""A generated downstream "serving" repository for command-case tests (importable as `serving_repo`).

The repository is what a model-serving project looks like to the harness: a
``repro.py`` script and a pytest suite (``tests/test_serving.py``), neither of
them written to any harness ABI.  From the culprit commit on, ``serving/engine.py``
fails intermittently the way the device runtime does: it prints
``[ERROR] RUNTIME ... error code is 507018`` to stderr and raises.  Whether a call
fails is drawn from ``random.Random(f"{seed}:{n}")`` with ``n`` a call count kept in
the file ``$SERVING_FLAKE_COUNTER`` (shared by every process, so a run of repeats
draws fresh numbers and the same run order gives the same outcomes) and
``fail_p`` fixed per commit.  ``test_prefill`` never calls the flaky path, so a
table per test shows which tests the fault reaches.  A branch ``fix`` from the last
commit sets ``fail_p`` back to 0.

Commits are dated and authored by ``gitrepo``'s fixed identity: the same arguments give
the same shas.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from gitrepo import commit_files, git, init_repo

COUNTER_ENV = "SERVING_FLAKE_COUNTER"

_ENGINE = '''\
"""The serving engine: decode calls the device; from one commit on it faults sometimes."""
import os
import random
import sys

FAIL_P = {fail_p!r}
VERSION = "{version}"


def _draw() -> float:
    path = os.environ.get("{counter}")
    n = 0
    if path:
        try:
            with open(path) as fh:
                n = int(fh.read() or 0)
        except FileNotFoundError:
            n = 0
        with open(path, "w") as fh:
            fh.write(str(n + 1))
    return random.Random(f"{seed}:{{n}}").random()


def decode(tokens):
    if FAIL_P and _draw() < FAIL_P:
        print("[ERROR] RUNTIME(12345,python):2026-12-02-10:00:00.000.000 [stream.cc:999] "
              "rtStreamSynchronize execute failed, reason=[aicpu exception]", file=sys.stderr)
        print("E39999: Inner Error! rtStreamSynchronize execute failed, error code is 507018",
              file=sys.stderr)
        raise RuntimeError("ACL stream synchronize failed, error code is 507018")
    return [t + 1 for t in tokens]


def prefill(tokens):
    return list(reversed(tokens))
'''

_REPRO = '''\
"""Repro: decode once; exit 1 when the device faults."""
import sys

from serving.engine import decode

try:
    print("decoded", decode([1, 2, 3]))
except RuntimeError as exc:
    print("repro failed:", exc)
    sys.exit(1)
'''

_TESTS = '''\
from serving.engine import decode, prefill


def test_decode():
    assert decode([1, 2]) == [2, 3]


def test_prefill():
    assert prefill([1, 2]) == [2, 1]
'''


@dataclass(frozen=True)
class ServingRepo:
    path: Path
    shas: list[str]          # main, oldest first
    culprit: str             # the first commit whose decode faults
    fix: str                 # the tip of branch fix


def make_serving_repo(path: Path, *, commits: int = 6, culprit: int = 3, fail_p: float = 0.6,
                      seed: int = 0) -> ServingRepo:
    """``commits`` commits on main; from index ``culprit`` on, decode faults with probability ``fail_p``."""
    init_repo(path)
    shas = []
    for i in range(commits):
        p = fail_p if i >= culprit else 0.0
        files = {
            "serving/__init__.py": "",
            "serving/engine.py": _ENGINE.format(fail_p=p, version=f"0.{i}", counter=COUNTER_ENV, seed=seed),
            "repro.py": _REPRO,
            "tests/test_serving.py": _TESTS,
            "CHANGELOG": "".join(f"- change {k}\n" for k in range(i + 1)),
        }
        shas.append(commit_files(path, files, f"change {i}" + (" (stream reuse)" if i == culprit else ""), i))
    git(path, "checkout", "--quiet", "-b", "fix")
    fix = commit_files(path, {"serving/engine.py": _ENGINE.format(fail_p=0.0, version="fix", counter=COUNTER_ENV,
                                                                  seed=seed)},
                       "fix: synchronise the stream before reuse", commits)
    git(path, "checkout", "--quiet", "main")
    return ServingRepo(path, shas, shas[culprit], fix)


def case_files(folder: Path) -> Path:
    """The two command case files the serving repository is run with (outside the repository)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "repro.yaml").write_text(textwrap.dedent("""\
        name: repro
        command: "{python} repro.py"
        timeout_s: 60
        """))
    (folder / "suite.yaml").write_text(textwrap.dedent("""\
        name: serving-suite
        command: ["{python}", "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider", "--junitxml={junit}"]
        env: {PYTEST_DISABLE_PLUGIN_AUTOLOAD: "1"}
        timeout_s: 120
        """))
    return folder


# -- the other way round: the kernel library switches under a fixed serving checkout ----------

_SERVING_ENGINE = '''\
"""The serving engine of a fixed checkout: decode and prefill call the kernel library on the PYTHONPATH."""
from pto.runtime import decode, prefill  # noqa: F401
'''


def make_kernel_library(path: Path, *, commits: int = 6, culprit: int = 3, fail_p: float = 0.6,
                        seed: int = 0) -> ServingRepo:
    """A kernel library (package ``pto``) whose ``pto.runtime.decode`` faults with a printed 507018 on
    ``fail_p`` of calls from commit ``culprit`` on (the same draw as the serving engine above); a
    branch ``fix`` sets that back to 0.  What a PR that fixes the library is compared on."""
    init_repo(path)
    shas = []
    for i in range(commits):
        p = fail_p if i >= culprit else 0.0
        files = {"pto/__init__.py": "",
                 "pto/runtime.py": _ENGINE.format(fail_p=p, version=f"0.{i}", counter=COUNTER_ENV, seed=seed),
                 "CHANGELOG": "".join(f"- change {k}\n" for k in range(i + 1))}
        shas.append(commit_files(path, files, f"change {i}" + (" (stream reuse)" if i == culprit else ""), i))
    git(path, "checkout", "--quiet", "-b", "fix")
    fix = commit_files(path, {"pto/runtime.py": _ENGINE.format(fail_p=0.0, version="fix", counter=COUNTER_ENV,
                                                               seed=seed)},
                       "fix: synchronise the stream before reuse", commits)
    git(path, "checkout", "--quiet", "main")
    return ServingRepo(path, shas, shas[culprit], fix)


def make_serving_checkout(path: Path) -> Path:
    """A serving checkout that imports its kernels from the library on the PYTHONPATH (``pto``): its
    ``repro.py`` and ``tests/test_serving.py`` as above; not a git repository (it does not change)."""
    for name, text in {"serving/__init__.py": "", "serving/engine.py": _SERVING_ENGINE, "repro.py": _REPRO,
                       "tests/test_serving.py": _TESTS}.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path
