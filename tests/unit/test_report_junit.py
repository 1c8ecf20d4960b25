"""JUnit XML: junitparser round trip, plain ElementTree parse, the JUnit schema, nasty text."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from junitparser import Error, Failure, JUnitXml, Skipped

from harness.outcomes import Outcome, Result
from harness.document import build_document
from harness.reports.junit import write_junit
from report_samples import NASTY_ID, NASTY_SUMMARY, sample_document

XSD = Path(__file__).resolve().parents[1] / "fixtures" / "junit.xsd"


@pytest.fixture
def doc(tmp_path):
    return sample_document(tmp_path)


@pytest.fixture
def written(tmp_path, doc):
    path = tmp_path / "out" / "junit.xml"
    write_junit(path, doc)
    return path


def _cases(xml: JUnitXml):
    return [case for suite in xml for case in suite]


def test_round_trip_counts_types_and_messages(written):
    xml = JUnitXml.fromfile(str(written))
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (17, 10, 1, 1)
    suites = {s.name: s for s in xml}
    assert set(suites) == {"decode-rope-kv", "paged-attn", "evil|matrix"}
    decode = suites["decode-rope-kv"]
    assert (decode.tests, decode.failures, decode.errors, decode.skipped) == (10, 5, 0, 0)
    types = Counter()
    for case in _cases(xml):
        for res in case.result:
            types[type(res).__name__, res.type if not isinstance(res, Skipped) else None] += 1
    assert types == Counter({("Failure", "FAIL_507018"): 5, ("Failure", "MISMATCH"): 4,
                             ("Failure", "HANG"): 1, ("Error", "HARNESS_ERROR"): 1, ("Skipped", None): 1})
    by_name = {c.name: c for c in _cases(xml)}
    fault = by_name["decode-rope-kv[batch=16,seq_lens=uniform(1,3756),slot_mode=arange,seed=1234] "
                    "[repeat 3] @upstream"]
    assert fault.classname == "decode-rope-kv" and fault.time == 0.5
    (failure,) = fault.result
    assert isinstance(failure, Failure)
    assert failure.message == "device fault 507018 (aicore exception)"
    assert "RuntimeError: ACL error 507018" in failure.text      # the report
    assert "ACL error 507018: aicore exception" in failure.text  # the log tail
    assert any(isinstance(r, Skipped) for c in _cases(xml) for r in c.result)
    assert any(isinstance(r, Error) for c in _cases(xml) for r in c.result)


def test_names_without_refs_or_repeats(tmp_path):
    results = [Result("m[a=1]", Outcome.PASS, matrix="m", device="cpu"),
               Result("m[a=2]", Outcome.MISMATCH, matrix="m", device="cpu", summary="bad")]
    doc = build_document(results, started=0.0, devices=["cpu"], command=["harness"])
    write_junit(tmp_path / "j.xml", doc)
    names = [c.name for c in _cases(JUnitXml.fromfile(str(tmp_path / "j.xml")))]
    assert names == ["m[a=1]", "m[a=2]"]


def test_same_case_on_two_devices_gets_distinct_names(tmp_path):
    results = [Result("m[a=1]", Outcome.PASS, matrix="m", device="cuda:0"),
               Result("m[a=1]", Outcome.PASS, matrix="m", device="cuda:1")]
    doc = build_document(results, started=0.0, devices=["cuda:0", "cuda:1"], command=["harness"])
    write_junit(tmp_path / "j.xml", doc)
    names = [c.name for c in _cases(JUnitXml.fromfile(str(tmp_path / "j.xml")))]
    assert names == ["m[a=1] on cuda:0", "m[a=1] on cuda:1"]


def test_testcase_properties(written):
    root = ET.parse(written).getroot()
    case = next(c for c in root.iter("testcase") if c.get("name").startswith("paged-attn[batch=4]")
                and c.get("name").endswith("@fix"))
    assert list(case)[0].tag == "properties"                     # first child, as the schema wants
    props = {p.get("name"): p.get("value") for p in case.find("properties")}
    assert props["seed"] == "7" and props["device"] == "npu:0" and props["ref"] == "fix"
    assert props["params.batch"] == "4"
    assert props["compare.out.bad_count"] == "64" and props["compare.out.numel"] == "512"
    assert props["compare.out.outcome"] == "MISMATCH"
    assert float(props["compare.out.max_abs_error"]) == pytest.approx(1.0, abs=1e-5)
    fault = next(c for c in root.iter("testcase") if c.get("name").startswith("decode-rope-kv"))
    fprops = {p.get("name"): p.get("value") for p in fault.find("properties")}
    assert fprops["code"] == "507018" and fprops["label"] == "FAIL_507018"
    suite_props = {p.get("name"): p.get("value") for p in root.find("testsuite").find("properties")}
    assert suite_props["env.PTO2_RING_HEAP"] == "1073741824"
    assert suite_props["ref.upstream"].startswith("68889bc")
    assert "CANN 8.0.RC1" in suite_props["device.npu:0"]


def test_nasty_text_parses_and_survives(written):
    raw = written.read_bytes()
    assert b"\x00" not in raw and b"\x1b" not in raw and b"\x07" not in raw
    root = ET.fromstring(raw)                                   # would raise on illegal characters
    evil = next(c for c in root.iter("testcase") if c.get("name").startswith("evil["))
    assert evil.get("name") == NASTY_ID + " @upstream"
    failure = evil.find("failure")
    assert failure.get("message") == " ".join(NASTY_SUMMARY.split())
    assert "\n" not in failure.get("message")
    text = failure.text
    assert "<script>alert('log')</script>" in text               # as text, escaped in the file
    assert "red text" in text and "[31m" not in text              # ANSI colours dropped
    assert "\\x00" in text and "\\x07" in text                    # control characters shown, not kept
    props = {p.get("name"): p.get("value") for p in evil.find("properties")}
    assert props["params.name"] == "<script>alert(1)</script>"


def test_valid_against_the_junit_schema(written):
    xmlschema = pytest.importorskip("xmlschema", reason="xmlschema is not installed (pip install '.[test]')")
    schema = xmlschema.XMLSchema(str(XSD))
    schema.validate(str(written))


def test_log_tail_is_capped(tmp_path):
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i} " + "x" * 300 + "\n" for i in range(5000)))
    r = Result("m[a=1]", Outcome.CRASH, matrix="m", summary="SIGSEGV", code="SIGSEGV", log=str(log),
               report="worker died")
    doc = build_document([r], started=0.0, devices=["cpu"], command=["harness"])
    write_junit(tmp_path / "j.xml", doc)
    (case,) = _cases(JUnitXml.fromfile(str(tmp_path / "j.xml")))
    (failure,) = case.result
    tail = failure.text.split("---\n", 1)[1]
    assert tail.splitlines()[-1].startswith("line 4999 ")
    assert len(tail.splitlines()) <= 40 and len(tail.encode()) <= 8192


def test_write_is_atomic_and_replaces(tmp_path, doc):
    path = tmp_path / "j.xml"
    path.write_text("old")
    write_junit(path, doc)
    assert path.read_text().startswith("<?xml")
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["j.xml"]


def test_a_failed_render_leaves_the_old_file(tmp_path, monkeypatch):
    import harness.reports.junit as junit
    path = tmp_path / "j.xml"
    path.write_text("old")
    doc = build_document([Result("m[a=1]", Outcome.PASS)], started=0.0, devices=["cpu"], command=["h"])

    def boom(self, *a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(junit.JUnitXml, "write", boom)
    with pytest.raises(OSError):
        write_junit(path, doc)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["j.xml"]


def test_empty_document(tmp_path):
    doc = build_document([], started=0.0, devices=["cpu"], command=["harness"])
    write_junit(tmp_path / "j.xml", doc)
    xml = JUnitXml.fromfile(str(tmp_path / "j.xml"))
    assert xml.tests == 0
