"""The JUnit XML a command wrote to ``{junit}``: one ``TestCase`` per test, named as pytest names it.

Read with junitparser.  A file over ``MAX_JUNIT_BYTES``, one that is not XML, or XML
that is not JUnit is a ``JUnitError`` (one line): the runner turns it into a finding
for the command case, never a crash.  A test is named by its file and its name
(``tests/test_x.py::test_decode``, ``tests/test_x.py::TestA::test_b``): pytest's
JUnit gives the dotted module and class (``tests.test_x.TestA``), which is mapped
back to a file under the command's cwd where one exists (or the ``file`` attribute
some writers add), and kept as it is otherwise.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from xml.etree.ElementTree import ParseError

import junitparser

MAX_JUNIT_BYTES = 64 << 20
MESSAGE_CHARS = 8000


class JUnitError(Exception):
    """A JUnit file that cannot be read as one (too big, not XML, not JUnit)."""


@dataclass(frozen=True)
class TestCase:
    test_id: str          # tests/test_x.py::test_decode
    status: str           # passed | failed | error | skipped
    message: str          # the failure's message attribute
    text: str             # the failure's body, then captured stdout and stderr (bounded)
    duration_s: float


def _test_id(classname: str, name: str, file: str | None, cwd: Path) -> str:
    parts = [p for p in classname.split(".") if p]
    for cut in range(len(parts), 0, -1):          # the longest dotted prefix that is a file
        candidate = Path(*parts[:cut]).with_suffix(".py")
        if (cwd / candidate).is_file():
            return "::".join([candidate.as_posix(), *parts[cut:], name])
    if file:
        rest = parts[len(Path(file).with_suffix("").parts):] if parts else []
        return "::".join([Path(file).as_posix(), *rest, name])
    return f"{classname}::{name}" if classname else name


def _bounded(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS // 4] + "\n...\n" + text[-MESSAGE_CHARS // 2:]


def read_junit(path: str | os.PathLike, cwd: str | os.PathLike) -> list[TestCase]:
    """Every test case of the file, in file order."""
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise JUnitError(f"cannot read {path}: {exc.strerror or exc}") from None
    if size > MAX_JUNIT_BYTES:
        raise JUnitError(f"{path} is {size} bytes, more than the {MAX_JUNIT_BYTES >> 20} MiB read")
    try:
        xml = junitparser.JUnitXml.fromfile(os.fspath(path))
    except ParseError as exc:
        raise JUnitError(f"{path} is not XML: {exc}") from None
    except Exception as exc:          # junitparser's own errors: a root that is not testsuites/testsuite
        raise JUnitError(f"{path} is not JUnit XML: {type(exc).__name__}: {exc}") from None
    suites = [xml] if isinstance(xml, junitparser.TestSuite) else list(xml)
    cwd = Path(cwd)
    found: list[TestCase] = []
    for suite in suites:
        for case in suite:
            if not isinstance(case, junitparser.TestCase):
                continue
            test_id = _test_id(case.classname or "", case.name or "", case._elem.get("file"), cwd)
            status, message, body = "passed", "", ""
            for r in case.result:
                kind = {junitparser.Failure: "failed", junitparser.Error: "error",
                        junitparser.Skipped: "skipped"}.get(type(r))
                if kind is None:
                    continue
                status, message, body = kind, r.message or "", r.text or ""
                if kind != "skipped":
                    break
            extra = "\n".join(t for t in (case.system_out, case.system_err) if t)
            try:
                duration = float(case.time or 0.0)
            except (TypeError, ValueError):
                duration = 0.0
            found.append(TestCase(test_id, status, _bounded(message), _bounded("\n".join(filter(None, (body, extra)))),
                                  duration))
    return found
