"""A latency compare rendered: the PR's Markdown table, the HTML section with each case's distributions."""
from __future__ import annotations

import random

from harness.latency.across import latency_rows
from harness.outcomes import Outcome, Result
from harness.reports.html import render_html
from harness.reports.markdown import render_markdown
from harness.report_document import build_document

HOSTILE = "dec|ode<script>"


def _results():
    out = []
    for ref, scale in (("upstream", 4.12e-4), ("pr", 3.61e-4)):
        for r in range(6):
            rng = random.Random(f"{ref}{r}")
            samples = [scale * rng.lognormvariate(0, 0.01) for _ in range(50)]
            out.append(Result(case_id=HOSTILE, outcome=Outcome.PASS, ref=ref, repeat=r, metrics={"latency": {
                "measured": True, "median_s": sorted(samples)[25], "samples_s": samples, "rel_noise": 0.001}}))
    return out


def _doc(latency=True):
    results = _results()
    return build_document(results, started=0.0, devices=["cpu"], command=["harness"], kind="compare",
                          latency=latency_rows(results, ["upstream", "pr"]) if latency else None)


def test_markdown_has_the_pr_table_per_case_us_ratio_ci_verdict():
    md = render_markdown(_doc())
    assert "### Latency" in md and "| case | baseline | candidate | ratio | 95% CI | verdict |" in md
    row = next(line for line in md.splitlines() if "upstream: " in line)
    assert "upstream: 41" in row and "pr: 36" in row and "| 0.87" in row and "**FASTER**" in row
    assert "<script>" not in md and "dec\\|ode" in md


def test_html_has_the_table_and_a_distribution_per_case():
    page = render_html(_doc())
    assert '<section id="latency">' in page and page.count('<svg class="latency"') == 1
    assert "<b>FASTER</b>" in page and HOSTILE not in page
    assert "dec|ode&lt;script&gt;" in page


def test_no_latency_section_without_a_latency_compare():
    assert "### Latency" not in render_markdown(_doc(latency=False))
    assert '<section id="latency">' not in render_html(_doc(latency=False))
