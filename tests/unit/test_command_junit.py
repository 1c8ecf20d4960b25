"""JUnit written by a command: one test case each, named as pytest names it; bad files are one line."""
from __future__ import annotations

import os

import pytest

from harness.commands.junit import MAX_JUNIT_BYTES, JUnitError, read_junit

# As pytest 8 writes it (junit_family xunit2), for tests/test_serving.py with a class.
PYTEST_XML = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0"
failures="1" skipped="1" tests="4" time="0.2" timestamp="2026-12-02T10:00:00" hostname="h">
<testcase classname="tests.test_serving" name="test_decode" time="0.011"><failure message="RuntimeError: ACL stream synchronize failed, error code is 507018">def test_decode():
&gt;       decode([1])
E       RuntimeError: ACL stream synchronize failed, error code is 507018</failure></testcase>
<testcase classname="tests.test_serving" name="test_prefill" time="0.001" />
<testcase classname="tests.test_serving.TestBatch" name="test_b[4]" time="0.002" />
<testcase classname="tests.test_serving" name="test_fp8" time="0.000"><skipped type="pytest.skip" message="no fp8">x</skipped></testcase>
</testsuite></testsuites>
"""


def _write(tmp_path, text: str):
    path = tmp_path / "junit.xml"
    path.write_text(text)
    return path


def test_pytest_junit_becomes_one_test_case_each_named_by_file(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_serving.py").write_text("")
    tests = read_junit(_write(tmp_path, PYTEST_XML), tmp_path)
    assert [(t.test_id, t.status) for t in tests] == [
        ("tests/test_serving.py::test_decode", "failed"),
        ("tests/test_serving.py::test_prefill", "passed"),
        ("tests/test_serving.py::TestBatch::test_b[4]", "passed"),
        ("tests/test_serving.py::test_fp8", "skipped"),
    ]
    assert "507018" in tests[0].message and "decode([1])" in tests[0].text
    assert tests[0].duration_s == pytest.approx(0.011)


def test_without_the_file_the_dotted_name_is_kept(tmp_path):
    tests = read_junit(_write(tmp_path, PYTEST_XML), tmp_path / "elsewhere")
    assert tests[1].test_id == "tests.test_serving::test_prefill"


def test_a_bare_testsuite_root_is_read_too(tmp_path):
    xml = '<testsuite name="s"><testcase classname="a" name="b"/></testsuite>'
    assert [t.test_id for t in read_junit(_write(tmp_path, xml), tmp_path)] == ["a::b"]


@pytest.mark.parametrize("text, says", [
    ("not xml at all", "is not XML"),
    ("<testsuites><testsuite>", "is not XML"),
    ("<html><body/></html>", "not JUnit XML"),
])
def test_a_file_that_is_not_junit_is_a_one_line_error(tmp_path, text, says):
    with pytest.raises(JUnitError) as info:
        read_junit(_write(tmp_path, text), tmp_path)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_a_huge_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "junit.xml"
    with open(path, "wb") as fh:          # sparse: no disk, no time
        fh.truncate(MAX_JUNIT_BYTES + 1)
    with pytest.raises(JUnitError, match="more than the 64 MiB"):
        read_junit(path, tmp_path)
    os.unlink(path)
