"""A result's ``warnings`` and ``hint`` (docs/json-schema.md): kept through JSON and the store's
round trip, and shown by every renderer: the terminal, Markdown and HTML list the warnings of
passing results too, once per case and text."""
from __future__ import annotations

import io
import json

from rich.console import Console

from harness.outcomes import Outcome, Result
from harness.document import build_document, results_of
from harness.reports.html import render_html
from harness.reports.markdown import render_markdown
from harness.reports.terminal import Reporter
from harness.document.summary import summarize

WARNING = ("the kernel changed the environment: MYLIB_FAST (set); put back after this case, so later cases "
           "in this worker do not see the change")
RESULTS = [Result(case_id="m[seed=0]", outcome=Outcome.PASS, warnings=(WARNING,)),
           Result(case_id="m[seed=0]", outcome=Outcome.PASS, repeat=1, warnings=(WARNING,)),
           Result(case_id="m[seed=1]", outcome=Outcome.PASS),
           Result(case_id="m[seed=2]", outcome=Outcome.MISMATCH, summary="query: 64 / 64 elements bad; hint: "
                  "looks like interleaved RoPE", hint="looks like interleaved RoPE")]


def _doc() -> dict:
    return build_document(RESULTS, started=0.0, devices=["cpu"], command=["harness"])


def test_warnings_and_hint_survive_json():
    back = results_of(json.loads(json.dumps(_doc())))
    assert back == RESULTS and back[0].warnings == (WARNING,) and back[3].hint == "looks like interleaved RoPE"
    assert Result.from_json({"case_id": "old", "outcome": "PASS"}).warnings == ()     # a document without them


def test_every_renderer_lists_the_warnings_once_per_case():
    buf = io.StringIO()
    Reporter(total=4, plain=True, console=Console(file=buf, width=400)).final(RESULTS, summarize(RESULTS))
    out = buf.getvalue()
    assert f"warnings on results:\n  m[seed=0]: {WARNING}\n" in out and out.count(WARNING) == 1
    markdown = render_markdown(_doc())
    assert "### Warnings on results" in markdown and markdown.count("MYLIB\\_FAST \\(set\\)") == 1
    page = render_html(_doc())
    assert '<section id="warnings">' in page and page.count("MYLIB_FAST (set)") == 1


def test_no_warning_no_section():
    quiet = [Result(case_id="m", outcome=Outcome.PASS)]
    doc = build_document(quiet, started=0.0, devices=["cpu"], command=["harness"])
    buf = io.StringIO()
    Reporter(total=1, plain=True, console=Console(file=buf, width=200)).final(quiet, summarize(quiet))
    assert "warnings on results" not in buf.getvalue()
    assert "Warnings on results" not in render_markdown(doc) and 'id="warnings"' not in render_html(doc)
