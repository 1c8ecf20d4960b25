"""A generated small pure-Python library with a pytest suite, for suite bisects (importable as `pylib_repo`).

What an outsider's project looks like: ``textkit/`` (two functions) and ``tests/test_textkit.py``,
no harness anywhere.  Two things go wrong in its history, as in the project the issue was found
on: at ``other`` a commit adds a test that fails from the start (``test_title_keeps_acronyms``,
a feature not written yet), and at ``culprit`` the tracked function breaks
(``slugify`` keeps state across calls: ``test_slugify_stateless`` fails from there on).  A
whole-suite bisect that takes the first failure at bad for its signature finds ``other``; the
culprit of ``test_slugify_stateless`` is ``culprit``.

Dates and identity are ``gitrepo``'s fixed ones: the same arguments give the same shas.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from gitrepo import commit_files, init_repo

TRACKED = "tests/test_textkit.py::test_slugify_stateless"
OTHER = "tests/test_textkit.py::test_title_keeps_acronyms"

_GOOD = '''\
"""textkit: small text helpers."""


def slugify(text):
    return "-".join(text.lower().split())


def title(text):
    return text.title()
'''

# The regression: a "cache" that leaks the previous call's words into the next one.
_BROKEN = '''\
"""textkit: small text helpers (now with a cache)."""
_seen = []


def slugify(text):
    _seen.extend(text.lower().split())
    return "-".join(_seen)


def title(text):
    return text.title()
'''

_TESTS = '''\
from textkit import slugify, title


def test_slugify():
    assert slugify("Hello World") == "hello-world"


def test_slugify_stateless():
    assert slugify("a b") == "a-b"
    assert slugify("c") == "c"


def test_title():
    assert title("hello world") == "Hello World"
'''

_OTHER_TEST = '''

def test_title_keeps_acronyms():
    assert title("the GPU kernel") == "The GPU Kernel"
'''


@dataclass(frozen=True)
class PyLib:
    path: Path
    shas: list[str]          # oldest first; shas[0] is good, shas[-1] bad
    other: str               # the commit that adds the already-failing test
    culprit: str             # the commit that breaks slugify


def make_pylib_repo(path: Path, *, commits: int = 8, other: int = 4, culprit: int = 5) -> PyLib:
    init_repo(path)
    shas = []
    for i in range(commits):
        tests = _TESTS + (_OTHER_TEST if i >= other else "")
        files = {"textkit/__init__.py": _BROKEN if i >= culprit else _GOOD, "tests/test_textkit.py": tests,
                 "NEWS": "".join(f"- change {k}\n" for k in range(i + 1))}
        message = ("add a test for acronyms in title()" if i == other else
                   "slugify: cache the words" if i == culprit else f"change {i}")
        shas.append(commit_files(path, files, message, i))
    return PyLib(path, shas, shas[other], shas[culprit])


def suite_case(folder: Path) -> Path:
    """The case file an outsider writes for it: the whole pytest suite, run where the code is."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "suite.yaml").write_text(textwrap.dedent("""\
        name: suite
        command: ["{python}", "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider", "--junitxml={junit}"]
        env: {PYTEST_DISABLE_PLUGIN_AUTOLOAD: "1"}
        timeout_s: 120
        """))
    return folder
