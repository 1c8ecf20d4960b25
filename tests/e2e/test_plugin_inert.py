"""Installed, the harness's pytest plugin is loaded into every pytest session of the environment.
In another project's suite that collects no case file and passes no harness option it must be
inert: the same JUnit, the same exit status, the same output as with ``-p no:harness``, and
nothing created (no store, no cache, no directory) even under a fresh ``HOME``."""
from __future__ import annotations

import difflib
import os
import pprint
import re
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

# Another project's suite, written as such suites are: fixtures and options of its own in a
# conftest (a `--device` and a `--store`, as ML projects have), parametrize, xfail, a failing test,
# a module that fails to import, and YAML fixtures in a `cases/` folder.
CONFTEST = '''\
import pytest

def pytest_addoption(parser):
    parser.addoption("--device", default="cpu", help="the project's own device option")
    parser.addoption("--store", default="memory")

@pytest.fixture
def device(request):
    return request.config.getoption("--device")

@pytest.fixture(scope="module")
def table():
    return {"a": 1, "b": 2}
'''
TESTS = '''\
import pytest

@pytest.mark.parametrize("key,value", [("a", 1), ("b", 2), ("c", 3)])
def test_lookup(table, key, value):
    assert table.get(key) == value

def test_device(device, request):
    assert device == "cpu" and request.config.getoption("--store") == "memory"

@pytest.mark.xfail(reason="known", strict=True)
def test_known_bug():
    assert 1 + 1 == 3

def test_fails():
    assert [1, 2] == [1, 3]

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass
'''
BROKEN = "import a_module_that_does_not_exist\n\ndef test_never():\n    pass\n"
FIXTURE_YAMLS = {
    "cases/add.yaml": "- {input: [1, 2], expected: 3}\n- {input: [2, 2], expected: 4}\n",
    "cases/expected.yaml": "name: tokenizer-cases\ninput: hello\nexpected: [15496]\n",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("other-project")
    tests = root / "tests"
    (tests / "cases").mkdir(parents=True)
    (tests / "conftest.py").write_text(CONFTEST)
    (tests / "test_things.py").write_text(TESTS)
    (tests / "test_broken.py").write_text(BROKEN)
    for rel, text in FIXTURE_YAMLS.items():
        (tests / rel).write_text(text)
    # a git checkout that is not a harness project: where our default store would go to the user cache
    git = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "suite"]):
        subprocess.run(cmd, cwd=root, check=True, env={**os.environ, **git}, capture_output=True)
    return root


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if ".git" not in p.parts
            and "__pycache__" not in p.parts}


def _run(project: Path, home: Path, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    home.mkdir()
    junit = project / f"junit-{home.name}.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "PYTEST_", "XDG_"))}
    before = _files(project)
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests", "-p", "no:cacheprovider",
                           "--continue-on-collection-errors", f"--junitxml={junit}", *args],
                          cwd=project, capture_output=True, text=True, timeout=120, env={**env, "HOME": str(home)})
    assert list(home.iterdir()) == [], f"created under HOME: {list(home.rglob('*'))}"
    assert _files(project) - before == {junit.name}, "created in the project"
    text = junit.read_text()
    junit.unlink()
    return proc, text


def _addresses(text: str) -> str:
    return re.sub(r"0x[0-9a-f]+", "0x", text)           # object reprs differ between any two runs


def _junit(text: str) -> tuple:
    """The JUnit's content without the run's own times, host, timestamp and object addresses."""
    def strip(e: ET.Element):
        attrs = {k: _addresses(v) for k, v in e.attrib.items() if k not in ("time", "timestamp", "hostname")}
        children = [strip(c) for c in e]
        if e.tag == "testsuite":          # under xdist, tests are written in the order they finished
            children.sort()
        return (e.tag, sorted(attrs.items()), _addresses(e.text or "").strip(), children)
    return strip(ET.fromstring(text))


def _output(text: str) -> str:
    """The terminal output without times, addresses and the header's list of installed plugins
    (the one line that names us, printed by pytest itself)."""
    text = _addresses(re.sub(r"in \d+\.\d+s", "in Ts", text))
    text = re.sub(r"^plugins: .*$", "plugins: ...", text, flags=re.MULTILINE)
    text = re.sub(r"\[gw\d+\]", "[gw]", text)         # which xdist worker ran a failing test
    # under xdist the progress characters come in the order tests finished
    text = re.sub(r"^([.FsxXE]+)(\s+\[)", lambda m: "".join(sorted(m.group(1))) + m.group(2), text,
                  flags=re.MULTILINE)
    text = re.sub(r"junit-[a-z0-9]+\.xml", "junit.xml", text)
    return _finish_order_free(text)


def _finish_order_free(text: str) -> str:
    """Failure sections (each from its ``____ name ____`` header) and the short summary's
    ``FAILED`` lines sorted: xdist prints both in the order the tests finished."""
    lines, out, block, blocks = text.splitlines(), [], None, []
    for line in lines:
        if re.match(r"^_{3,} .+ _{3,}$", line):
            block = [line]
            blocks.append(block)
        elif block is not None and not re.match(r"^(=|-+ .+ -+$)", line):    # a section's or junit's line
            block.append(line)
        else:
            if blocks:
                out += [x for b in sorted(blocks) for x in b]
                blocks, block = [], None
            out.append(line)
    out += [x for b in sorted(blocks) for x in b]
    fails = sorted(i for i, x in enumerate(out) if x.startswith(("FAILED ", "ERROR ")))
    for i, x in zip(fails, sorted(out[i] for i in fails)):
        out[i] = x
    return "\n".join(out)


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_another_projects_suite_is_the_same_with_and_without_the_plugin(project, tmp_path, extra):
    with_plugin, junit_with = _run(project, tmp_path / "home1", *extra)
    without, junit_without = _run(project, tmp_path / "home2", "-p", "no:harness", *extra)
    assert with_plugin.returncode == without.returncode == 1, with_plugin.stdout + with_plugin.stderr
    assert _junit(junit_with) == _junit(junit_without), "\n".join(difflib.unified_diff(
        pprint.pformat(_junit(junit_with), width=160).splitlines(),
        pprint.pformat(_junit(junit_without), width=160).splitlines(), lineterm=""))
    assert _output(with_plugin.stdout) == _output(without.stdout), "\n".join(difflib.unified_diff(
        _output(with_plugin.stdout).splitlines(), _output(without.stdout).splitlines(), lineterm=""))
    assert with_plugin.stderr == without.stderr
    # what the suite itself did, to be sure it was exercised
    assert re.search(r"2 failed, 3 passed, 1 skipped, 1 xfailed, 1 error", with_plugin.stdout), with_plugin.stdout


def test_the_plugin_was_loaded_and_leaves_the_projects_option_names_alone(project, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], cwd=project / "tests",
                          capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    assert "--harness-device" in proc.stdout and "--harness-store" in proc.stdout
    assert "the project's own device option" in proc.stdout          # its --device, not ours
    assert not re.search(r"same as --harness-device\b(?!s)", proc.stdout)
    assert "same as --harness-repeat" in proc.stdout                  # a free name keeps its short alias


def test_a_harness_session_in_a_foreign_checkout_makes_its_store_under_a_fresh_home(project, tmp_path):
    """Asked for (a case file named), the plugin records the run where ``harness run`` would: the
    user cache's directory for this checkout, made on first use (it once refused it: exit 4)."""
    case = tmp_path / "one.yaml"
    case.write_text("name: one\nop: rope_kv_write\nmatrix:\n  seed: [0]\n")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS_", "PYTEST_", "XDG_"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", str(case), "-q", "-p", "no:cacheprovider",
                           "--no-golden-cache"], cwd=project, capture_output=True, text=True, timeout=300,
                          env={**env, "HOME": str(home)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stores = list(home.rglob("results.sqlite"))
    assert len(stores) == 1 and "repos" in stores[0].parts, list(home.rglob("*"))
    with sqlite3.connect(stores[0]) as conn:
        assert conn.execute("SELECT outcome FROM results").fetchall() == [("PASS",)]
