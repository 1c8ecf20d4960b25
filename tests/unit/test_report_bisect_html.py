"""A bisect's HTML page says what its Markdown says: the culprit (or the verdict), the tests failing at
the culprit and at bad, what a failing command printed, the other failures met, the reproduction
probability and the tally, each piece escaped; a page of no bisect has no such section."""
from __future__ import annotations

import re

import numpy as np

from test_bisect_driver import _commits, _result
from harness.bisect.driver import BisectState, Signature
from harness.bisect.search import FlakyBisect
from harness.outcomes import Outcome
from harness.refs.git import Commit
from harness.reports.html import render_html
from harness.reports.markdown import render_markdown


def _bisected(n: int, culprit: int, p: float, seed: int, commits: list[Commit] | None = None) -> dict:
    rng = np.random.default_rng(seed)
    state = BisectState(commits or _commits(n), FlakyBisect(n), Signature.parse("MISMATCH"))
    step = 0
    while (index := state.next_index()) is not None:
        shows = index >= culprit and rng.random() < p
        state.record(index, [_result(Outcome.MISMATCH if shows else Outcome.PASS)], f"run{step}")
        step += 1
    return {"kind": "bisect", "results": [], "bisect": state.report()}


def _section(page: str) -> str:
    start = page.index('<section id="bisect">')
    return page[start:page.index("</section>", start)]


def _text(fragment: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", fragment).split())


def test_the_page_names_the_culprit_its_probability_and_the_tally_the_markdown_names():
    doc = _bisected(16, 11, 0.6, 7)
    report = doc["bisect"]
    section = _section(render_html(doc))
    culprit = report["culprit"]["sha"][:12]
    assert f"<strong>First bad commit</strong>: <code>{culprit}</code>" in section
    assert f"posterior {100 * report['probability']:.2f}% after {report['runs']} runs" in section
    p = report["p"]
    assert (f"reproduction probability {p['mean']:.2f} ({100 * p['level']:.0f}% interval "
            f"{p['low']:.2f}-{p['high']:.2f})") in _text(section)
    ran = [t for t in report["tally"] if t["runs"]]
    assert section.count("<tr>") == len(ran) + 1                    # the header, then a row per commit that ran
    for t in ran:
        assert f"<td>{t['sha'][:12]}</td><td class=\"n\">{t['runs']}</td>" in section
    markdown = render_markdown(doc).replace("\\", "")
    assert f"`{culprit}`" in markdown and all(t["sha"][:12] in markdown for t in ran)


def test_an_undecided_bisect_gives_its_verdict_and_the_other_failures_met():
    state = BisectState(_commits(8), FlakyBisect(8, max_runs=2), Signature.parse("HANG"))
    state.record(8, [_result(Outcome.HANG)], "r1")
    state.record(3, [_result(Outcome.MISMATCH)], "r2")
    section = _section(render_html({"kind": "bisect", "results": [], "bisect": state.report()}))
    assert "<strong>UNDECIDED</strong> after 2 runs" in section
    assert "also seen: MISMATCH at 03aaaaaaaaaa" in section
    assert "First bad commit" not in section


def test_what_the_page_shows_of_a_commit_is_escaped():
    hostile = [Commit(sha=f"{i:02d}" + "b" * 38, subject=f"<script>alert({i})</script> & co",
                      author_date="2024-01-01T00:00:00+00:00", author="x <x@y>") for i in range(17)]
    page = render_html(_bisected(16, 9, 1.0, 3, commits=hostile))
    assert "<script>alert" not in page and "&lt;script&gt;alert(9)&lt;/script&gt; &amp; co" in _section(page)


def test_a_run_that_is_no_bisect_has_no_bisect_section():
    assert '<section id="bisect">' not in render_html({"kind": "run", "results": []})


def test_what_a_failing_command_printed_is_on_the_page():
    doc = _bisected(4, 2, 1.0, 1)
    doc["bisect"]["failure"] = {"label": "FAILED", "case_id": "repro", "ref": "0123456789ab",
                                "text": "ImportError: cannot import name 'CUDAProperties' from <kernels>\n"}
    section = _section(render_html(doc))
    assert "FAILED of <code>repro</code> at <code>0123456789ab</code> printed:" in section
    assert "<pre>ImportError: cannot import name &#x27;CUDAProperties&#x27; from &lt;kernels&gt;" in section
