"""A latency compare rendered: the PR's Markdown table, the HTML section with each case's distributions."""
from __future__ import annotations

import random

from harness.latency.across import latency_rows
from harness.outcomes import Outcome, Result
from harness.reports.html import render_html
from harness.reports.markdown import render_markdown
from harness.document import build_document

HOSTILE = "dec|ode<script>"


def _results():
    out = []
    for ref, scale in (("upstream", 4.12e-4), ("pr", 3.61e-4)):
        for r in range(8):
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
    assert "### Latency" in md and "| case | baseline | candidate | ratio | 99% CI | verdict |" in md
    row = next(line for line in md.splitlines() if "upstream: " in line)
    assert "upstream: 41" in row and "pr: 36" in row and "| 0.87" in row and "**FASTER**" in row
    assert "<script>" not in md and "dec\\|ode" in md


def test_html_has_the_table_and_a_distribution_per_case():
    page = render_html(_doc())
    assert '<section id="latency">' in page and page.count('<svg class="latency"') == 1
    assert "<b>FASTER</b>" in page and HOSTILE not in page
    assert "dec|ode&lt;script&gt;" in page and "<th>99% CI</th>" in page


def test_the_ci_column_says_its_level_and_each_cell_its_own_when_levels_differ():
    """A compare's interval is 99% (docs/latency.md, "Many looks"); a verdict stored before the level
    was recorded was 95%: a table holding both says the level in each cell."""
    from harness.reports.latency_text import markdown_table
    rows = latency_rows(_results(), ["upstream", "pr"])
    old = {**rows[0], "latency_verdict": {k: v for k, v in rows[0]["latency_verdict"].items() if k != "conf"}}
    assert "| 95% CI |" in markdown_table([old])
    mixed = markdown_table([rows[0], old])
    assert "| CI |" in mixed and " (99%) |" in mixed and " (95%) |" in mixed


def test_no_latency_section_without_a_latency_compare():
    assert "### Latency" not in render_markdown(_doc(latency=False))
    assert '<section id="latency">' not in render_html(_doc(latency=False))


def _slow_row(sha: str, ratio: float, verdict: str) -> dict:
    return {"case_id": "lpkg-decode", "baseline": "good", "candidate": sha[:12],
            "latency_verdict": {"baseline": "good", "candidate": sha[:12], "baseline_median_s": 4.1e-4,
                                "candidate_median_s": 4.1e-4 * ratio, "ratio": ratio, "ci_low": ratio - 0.05,
                                "ci_high": ratio + 0.05, "verdict": verdict, "threshold": 0.1, "rounds": 6,
                                "samples": [60, 60], "why": ""}}


def test_a_perf_bisect_document_names_the_first_slow_commit_with_its_ratios():
    from harness.refs.latency_bisect import SlowBisect, Step, StepVerdict, conclusion_lines
    from harness.refs.git import Commit
    commits = [Commit(sha=f"{i}" * 40, subject=f"change {i}", author_date="2026-12-01T00:00:00+00:00",
                      author="Dev <d@x>") for i in range(5)]
    state = SlowBisect(commits[0], commits[1:], 0.1)
    state.steps = [Step(3, commits[4], StepVerdict.SLOW, (_slow_row(commits[4].sha, 1.98, "SLOWER"),), "c1"),
                   Step(1, commits[2], StepVerdict.SLOW, (_slow_row(commits[2].sha, 1.67, "SLOWER"),), "c2"),
                   Step(0, commits[1], StepVerdict.NOT_SLOW, (_slow_row(commits[1].sha, 1.01, "SAME"),), "c3")]
    state.first_slow, state.candidates = commits[2], [commits[2]]
    doc = build_document([], started=0.0, devices=["cpu"], command=["harness", "bisect"], kind="latency-bisect",
                         run_id="r", slower_than=state.to_json())
    md = render_markdown(doc).replace("\\", "")
    assert f"**First slow commit**: `{commits[2].sha[:12]}` change 2" in md
    assert "1.670x" in md and "**SLOWER**" in md                     # its ratio against good, as a table
    assert "1.980x" in md and "1.010x" in md                         # and every step's
    lines = conclusion_lines(state)
    assert lines[0] == f"{commits[2].sha} is the first bad commit"
    assert "lpkg-decode: 1.670x (95% CI 1.620-1.720, 6 rounds) SLOWER against good 000000000000" in lines



def test_a_perf_bisect_page_names_the_first_slow_commit_and_every_step():
    from harness.refs.latency_bisect import SlowBisect, Step, StepVerdict
    from harness.refs.git import Commit
    commits = [Commit(sha=f"{i}" * 40, subject=f"change <{i}>", author_date="2026-12-01T00:00:00+00:00",
                      author="Dev <d@x>") for i in range(4)]
    state = SlowBisect(commits[0], commits[1:], 0.1)
    state.steps = [Step(1, commits[2], StepVerdict.SLOW, (_slow_row(commits[2].sha, 1.67, "SLOWER"),), "c1"),
                   Step(0, commits[1], StepVerdict.NOT_SLOW, (_slow_row(commits[1].sha, 1.01, "SAME"),), "c2")]
    state.first_slow, state.candidates = commits[2], [commits[2]]
    doc = build_document([], started=0.0, devices=["cpu"], command=["harness", "bisect"], kind="latency-bisect",
                         run_id="r", slower_than=state.to_json())
    page = render_html(doc)
    section = page[page.index('<section id="slower-than">'):]
    section = section[:section.index("</section>")]
    assert f"<strong>First slow commit</strong>: <code>{commits[2].sha[:12]}</code> change &lt;2&gt;" in section
    assert "1.670x" in section and "<b>SLOWER</b>" in section       # its ratio against good, as the compare's table
    assert section.index(commits[2].sha[:12]) < section.index("Steps, in the order they ran")
    assert "1.010x" in section and "SAME" in section                 # every step
    assert "<2>" not in page                                          # the subject escaped
    undecided = SlowBisect(commits[0], commits[1:], 0.1)
    none = render_html(build_document([], started=0.0, devices=["cpu"], command=["harness", "bisect"],
                                      kind="latency-bisect", run_id="r", slower_than=undecided.to_json()))
    assert '<section id="slower-than">' in none and "First slow commit</strong>:" not in none
