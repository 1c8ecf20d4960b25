"""The inputs line of a failing case in Markdown and HTML reports: size and digest from
``metrics.inputs_bytes`` / ``metrics.inputs_digest``; absent when a result has neither."""
from __future__ import annotations

from harness.formats import inputs_text
from harness.outcomes import Outcome, Result
from harness.document import build_document
from harness.reports.html import render_html
from harness.reports.markdown import render_markdown


def doc(metrics: dict):
    result = Result("m[a=1]", Outcome.MISMATCH, device="cpu", summary="bad", metrics=metrics)
    return build_document([result], started=0.0, devices=["cpu"], command=["h"])


def test_inputs_text_sizes():
    assert inputs_text({"inputs_bytes": 256_052_352, "inputs_digest": "1a2b3c4d"}) == "256 MB, digest 1a2b3c4d"
    assert inputs_text({"inputs_bytes": 10_240_000_000, "inputs_digest": "0"}) == "10 GB, digest 0"
    assert inputs_text({"inputs_bytes": 2_500, "inputs_digest": "0"}) == "2.5 kB, digest 0"
    assert inputs_text({"inputs_bytes": 12, "inputs_digest": "0"}) == "12 B, digest 0"
    assert inputs_text({}) is None and inputs_text(None) is None


def test_reports_show_the_inputs_line():
    d = doc({"inputs_bytes": 256_052_352, "inputs_digest": "1a2b3c4d"})
    assert "  - inputs: 256 MB, digest 1a2b3c4d" in render_markdown(d)
    assert "<dt>inputs</dt><dd>256 MB, digest 1a2b3c4d</dd>" in render_html(d)


def test_reports_without_inputs_metrics_have_no_inputs_line():
    d = doc({})
    assert "inputs:" not in render_markdown(d)
    assert "<dt>inputs</dt>" not in render_html(d)
