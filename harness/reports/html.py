"""A one-file HTML report: opens from disk, fetches nothing.

Contents: the summary (counts per outcome label, with a filter), provenance,
the flake statistics when present, one table per matrix (the engineers'
table of ``document.outcome_table``) and the failures, one entry per case and
label (``document.failure_groups``: ``×8``, where they happened, the other
logs) with a representative's summary, comparison report, the localisation
figure of each failing buffer (see ``heatmap.py``) and the tail of its log.

* Self-contained: inline CSS, one small inline script, images as ``data:``
  URIs.  A Content-Security-Policy ``<meta>`` allows nothing else: no
  network, no other script (the one script is allowed by its hash, so even a
  script that slipped into the text could not run).
* Readable without JavaScript: everything is visible; the script only adds
  the outcome filter (its controls are ``hidden`` until the script shows them).
* Escaping: every string from a case file, kernel, log or environment goes
  through ``html.escape`` (after ``clean_text`` drops control characters).
* Size: the first ``MAX_DETAILED`` entries get figures, reports and logs;
  later ones get their summary and a shortened report only, and the page says so.
"""
from __future__ import annotations

import base64
import hashlib
import html
import os
from typing import Any, Mapping

from harness.reports.bisect_text import TALLY_COLUMNS, also_seen_lines, failing_lines, headline, p_parts, tally_rows
from harness.reports.latency_html import section as latency_section
from harness.reports.latency_html import slower_than_section
from harness.files import write_text
from harness.formats import blocking_rerun_text, device_log_text, inputs_text
from harness.logs import clean_text, log_tail
from harness.document import kind_of, results_of
from harness.document.failures import FailureGroup, failing, failure_groups, result_warnings
from harness.document.sections import FLAKE_COLUMNS, flake_confidence, flake_rows, provenance_items
from harness.document.table import label_counts, outcome_table, totals_text
from harness.intermediates import table as intermediates_table

__all__ = ["MAX_DETAILED", "render_html", "write_html"]

MAX_DETAILED = 200            # failure entries with figures, full report and log tail
MAX_FIGURES_PER_CASE = 3
REPORT_CHARS = 20_000
SHORT_REPORT_CHARS = 1_500
LOG_LINES = 40
LOG_BYTES = 8_192

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em;color:#1b1b1b;max-width:1400px}
h1{font-size:1.5em;margin:0 0 .2em}h2{font-size:1.2em;margin:1.4em 0 .4em;border-bottom:1px solid #ddd}
h3{font-size:1.05em;margin:1em 0 .3em}
table{border-collapse:collapse;margin:.3em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f2f2f2}td.n{text-align:right}
.pass{background:#e6f4e6}.fail{background:#fbe3e1}.skip,.mixed{background:#fff6d6}.empty{color:#999}
.label{font-family:ui-monospace,Menlo,Consolas,monospace;font-weight:600}.times{font-weight:600;color:#c0392b}
.case-id{font-family:ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
pre{background:#f7f7f7;border:1px solid #e2e2e2;padding:6px;overflow:auto;max-height:28em;font-size:12px;white-space:pre-wrap;word-break:break-all}
article{border:1px solid #ddd;border-left:4px solid #c0392b;padding:.2em .8em .6em;margin:.8em 0}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:0 .8em;margin:.3em 0}dl.meta dt{color:#666}dl.meta dd{margin:0;word-break:break-all}
figure{margin:.4em 0}figcaption{font-size:12px;color:#555}
svg.heatmap{display:block;overflow:visible}svg.heatmap text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;font-size:12px;fill:#1b1b1b}
svg.heatmap text.title{font-size:13px;font-weight:600}
tr.verdict-bad td{background:#fde2e1}tr.verdict-inherited td{color:#8a6d3b}tr.verdict-bit-exact td:nth-child(2){font-weight:600}
#filter{margin:.4em 0}#filter label{margin-right:1em;white-space:nowrap}
.note{color:#555;font-style:italic}
[hidden]{display:none!important}
"""

# The filter: show only the rows / cases carrying a checked label.
_SCRIPT = """(function(){
var bar=document.getElementById('filter');if(!bar)return;bar.hidden=false;
var boxes=Array.prototype.slice.call(bar.querySelectorAll('input[type=checkbox]'));
var items=Array.prototype.slice.call(document.querySelectorAll('[data-labels]'));
function apply(){var on={};boxes.forEach(function(b){on[b.value]=b.checked;});
items.forEach(function(el){el.hidden=!el.getAttribute('data-labels').split(' ').some(function(l){return on[l];});});}
boxes.forEach(function(b){b.addEventListener('change',apply);});
var all=document.getElementById('filter-all');if(all)all.addEventListener('click',function(){boxes.forEach(function(b){b.checked=true;});apply();});
var bad=document.getElementById('filter-failed');if(bad)bad.addEventListener('click',function(){boxes.forEach(function(b){b.checked=b.getAttribute('data-failed')==='1';});apply();});
})();"""


def _e(value: Any) -> str:
    """Escaped text (quotes too: safe in attributes)."""
    return html.escape(clean_text(value), quote=True)


def _token(label: str) -> str:
    """A label as a filter token (no spaces or quotes)."""
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in label) or "_"


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


def _csp() -> str:
    digest = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
    style = base64.b64encode(hashlib.sha256(_CSS.encode()).digest()).decode()
    return (f"default-src 'none'; img-src data:; style-src 'sha256-{style}'; "
            f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'")


def _warnings(out: list[str], results) -> None:
    """What results say the user must know that is not a failure (``Result.warnings``), once each."""
    warned = result_warnings(results)
    if warned:
        out.append('<section id="warnings"><h2>Warnings on results</h2><ul>')
        out += [f"<li><code>{_e(case_id)}</code>: {_e(text)}</li>" for case_id, text in warned]
        out.append("</ul></section>")


def _summary(out: list[str], results, failed_labels: set[str]) -> None:
    out.append('<section id="summary"><h2>Summary</h2>')
    out.append(f"<p><strong>{len(results)}</strong> results: {_e(totals_text(results))}.</p>")
    counts = label_counts(results)
    out.append('<table class="counts"><tr><th>outcome</th><th>results</th></tr>')
    for label, n in counts.items():
        cls = "fail" if label in failed_labels else ("skip" if label == "SKIPPED" else "pass")
        out.append(f'<tr class="{cls}"><td class="label">{_e(label)}</td><td class="n">{n}</td></tr>')
    out.append("</table>")
    if counts:
        out.append('<div id="filter" hidden><strong>Show:</strong> ')
        for label in counts:
            failed_flag = "1" if label in failed_labels else "0"
            out.append(f'<label><input type="checkbox" value="{_e(_token(label))}" data-failed="{failed_flag}"'
                       f' checked> {_e(label)}</label>')
        out.append('<button type="button" id="filter-all">all</button> '
                   '<button type="button" id="filter-failed">failures only</button></div>')
    out.append("</section>")


def _provenance(out: list[str], doc: Mapping[str, Any]) -> None:
    out.append('<section id="provenance"><h2>Provenance</h2><table>')
    for key, value in provenance_items(doc):
        out.append(f"<tr><th>{_e(key)}</th><td>{_e(value)}</td></tr>")
    out.append("</table>")
    shards = doc.get("shards")
    if isinstance(shards, list) and shards:
        import json
        out.append("<details><summary>shards</summary><pre>"
                   + _e(_cap(json.dumps(shards, indent=1, default=str), REPORT_CHARS)) + "</pre></details>")
    out.append("</section>")


def _flake(out: list[str], doc: Mapping[str, Any]) -> None:
    rows = flake_rows(doc)
    if not rows:
        return
    conf = flake_confidence(doc)
    out.append('<section id="flake"><h2>Flake statistics</h2><table><tr>')
    out += [f"<th>{_e(c if c not in ('Wilson', 'exact (Clopper-Pearson)') else f'{c} {conf}')}</th>"
            for c in FLAKE_COLUMNS]
    out.append("</tr>")
    for row in rows:
        out.append("<tr>" + "".join(f'<td{" class=case-id" if i == 0 else ""}>{_e(v)}</td>'
                                    for i, v in enumerate(row)) + "</tr>")
    out.append("</table></section>")


def _bisect(out: list[str], doc: Mapping[str, Any]) -> None:
    """A bisect's conclusion (the pieces the Markdown shows too: ``bisect_text``) and its tally."""
    report = doc.get("bisect")
    if not report:
        return
    label, culprit, tail = headline(report)
    out.append('<section id="bisect"><h2>Bisect</h2><p>')
    if culprit:
        sha, subject, date = culprit
        out.append(f"<strong>{_e(label)}</strong>: <code>{_e(sha)}</code> {_e(subject)} ({_e(date)}){_e(tail)}")
    else:
        out.append(f"<strong>{_e(label)}</strong>{_e(tail)}")
    out.append("</p>")
    out += [f"<p>{_e(line)}</p>" for line in failing_lines(report)]
    failure = report.get("failure")
    if failure:         # a command's FAILED says nothing of why: what it printed does
        out.append(f"<p>{_e(failure['label'])} of <code>{_e(failure['case_id'])}</code> at "
                   f"<code>{_e(failure['ref'])}</code> printed:</p><pre>{_e(_cap(failure['text'], REPORT_CHARS))}</pre>")
    out += [f"<p>{_e(line.strip())}</p>" for line in also_seen_lines(report)]
    p = p_parts(report)
    if p:
        out.append(f"<p>Signature <code>{_e(p[0])}</code>{_e(p[1])}</p>")
    rows = tally_rows(report)
    if rows:
        out.append("<table><tr>" + "".join(f"<th>{_e(c)}</th>" for c in TALLY_COLUMNS) + "</tr>")
        number = ' class="n"'          # runs, sightings, posterior: right-aligned
        out += ["<tr>" + "".join(f"<td{number if 0 < i < 4 else ''}>{_e(v)}</td>" for i, v in enumerate(row))
                + "</tr>" for row in rows]
        out.append("</table>")
    out.append("</section>")


def _matrices(out: list[str], doc: Mapping[str, Any], anchors: dict[str, str]) -> None:
    table = outcome_table(doc)
    out.append('<section id="matrices"><h2>Cases</h2>')
    head = "<tr><th>case</th>" + "".join(f"<th>{_e(c.title)}</th>" for c in table.columns) + "</tr>"
    for matrix, rows in table.matrices:
        out.append(f'<h3>{_e(matrix)} <span class="note">({len(rows)} cases)</span></h3><table>{head}')
        for row in rows:
            labels = " ".join(_token(label) for label in row.labels)
            case = _e(row.case_id)
            if row.case_id in anchors:
                case = f'<a href="#{anchors[row.case_id]}">{case}</a>'
            cells = "".join(f'<td class="{row.cell(c.key).status}">{_e(row.cell(c.key).text)}</td>'
                            for c in table.columns)
            out.append(f'<tr data-labels="{_e(labels)}"><td class="case-id">{case}</td>{cells}</tr>')
        out.append("</table>")
    out.append("</section>")


def _svg(drawn, title: str) -> str:
    """A figure as inline SVG: its PNG at its own pixel size in its box, its labels as text over it."""
    png = base64.b64encode(drawn.png).decode("ascii")
    w, h = drawn.width, drawn.height
    x, y, iw, ih = drawn.image_box
    texts = []
    for label in drawn.labels:
        turn = f' transform="rotate(-90 {label.x:g} {label.y:g})"' if label.vertical else ""
        texts.append(f'<text class="{label.role}" x="{label.x:g}" y="{label.y:g}" text-anchor="{label.anchor}"'
                     f' dominant-baseline="middle"{turn}>{_e(label.text)}</text>')
    return (f'<svg class="heatmap" role="img" aria-label="{_e(title)}" width="{w}" height="{h}" '
            f'viewBox="0 0 {w} {h}"><title>{_e(title)}</title>'
            f'<image href="data:image/png;base64,{png}" x="{x}" y="{y}" width="{iw}" height="{ih}"></image>'
            + "".join(texts) + "</svg>")


def _figures(r, renderer) -> list[str]:
    from harness.reports.heatmap import panels_for
    parts = []
    compare = r.metrics.get("compare") if isinstance(r.metrics, Mapping) else None
    if not isinstance(compare, Mapping):
        return parts
    for name, m in compare.items():
        if len(parts) >= MAX_FIGURES_PER_CASE:
            break
        if not isinstance(m, Mapping) or m.get("passed") is not False:
            continue
        panels = panels_for(str(name), m)
        if panels is None:
            continue
        drawn = renderer.draw(panels)
        caption = f"{name}: bad-element ratio"
        if panels.ratio is not None:
            (a0, a1), (n0, n1) = panels.axes, panels.size
            block = m["map"].get("block") or [1, 1]
            caption += (f" per {a0} x {a1} cell ({a0} 0..{max(n0 - 1, 0)} down, {a1} 0..{max(n1 - 1, 0)} "
                        f"across, blocks of {block[0]} x {block[1]} indices; grey: nothing compared)")
        if panels.pages is not None:
            n_pages = len(m["localisation"]["page"])
            caption += f"; per cache page (pages 0..{n_pages - 1}"
            caption += (f", each bar the worst of {panels.pages_per_bar} pages)" if panels.pages_per_bar > 1
                        else ")")
        if panels.ratio is not None:
            caption += "; right: the share of map cells at each bad ratio."
        parts.append(f"<figure>{_svg(drawn, 'localisation of ' + str(name))}"
                     f"<figcaption>{_e(caption)}</figcaption></figure>")
    return parts


def _intermediates(out: list[str], metrics, renderer=None) -> None:
    """The table of intermediates (docs/intermediates.md), each row coloured by its verdict, and
    (with a ``renderer``) the intermediate x head map of bad-element ratios beside the outputs'."""
    dumped = intermediates_table.data(metrics)
    if not dumped:
        return
    grid = intermediates_table.head_map(dumped)
    if renderer is not None and grid is not None:
        from harness.reports.heatmap import panels_for
        panels = panels_for("intermediates", {"map": grid})
        if panels is not None:
            caption = (f"intermediates: bad-element ratio per intermediate x query head (intermediates "
                       f"{', '.join(grid['names'])} down, heads 0..{grid['size'][1] - 1} across; a KV head's "
                       f"ratio is drawn under each query head that reads it)")
            out.append(f"<figure>{_svg(renderer.draw(panels), 'intermediates by head')}"
                       f"<figcaption>{_e(caption)}</figcaption></figure>")
    body, note = intermediates_table.rows(dumped)
    head = "".join(f"<th>{_e(h)}</th>" for h in intermediates_table.HEADER)
    trs = "".join(f'<tr class="verdict-{_token(row[1])}">' + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>"
                  for row in body)
    out.append(f'<details open class="intermediates"><summary>intermediates: {_e(dumped.get("headline", ""))}'
               f'</summary><table><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>'
               + (f'<p class="note">{_e(note)}</p>' if note else "") + "</details>")


def _case(out: list[str], g: FailureGroup, anchor: str, detailed: bool, renderer) -> None:
    r = g.first
    out.append(f'<article id="{anchor}" class="failed" data-labels="{_e(_token(g.label))}">')
    times = f' <span class="times">{_e(g.times)}</span>' if g.times else ""
    out.append(f'<h3><span class="label">{_e(g.label)}</span>{times} <span class="case-id">{_e(g.case_id)}</span></h3>')
    out.append(f"<p>{_e(r.summary)}</p>")
    if not g.same_summary and g.detail:
        out.append(f'<p class="note">all {g.count}: {_e(g.detail)}</p>')
    meta = [("where", g.where), ("code", r.code),
            ("duration", f"{r.duration_s:.3f} s" if isinstance(r.duration_s, (int, float)) else r.duration_s),
            ("kernel", r.kernel), ("inputs", inputs_text(r.metrics)), ("log", g.log), ("other logs", g.other_logs),
            ("re-run", blocking_rerun_text(r.metrics))]
    if r.params:
        meta.append(("params", ", ".join(f"{k}={v}" for k, v in r.params.items())))
    out.append('<dl class="meta">' + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in meta
                                             if v not in (None, "")) + "</dl>")
    if detailed:
        out += _figures(r, renderer)
    if r.report:
        text = _cap(clean_text(r.report), REPORT_CHARS if detailed else SHORT_REPORT_CHARS)
        out.append(f"<details open><summary>report</summary><pre>{html.escape(text)}</pre></details>")
    device_log = device_log_text(r.metrics)
    if device_log:
        head, _, body = device_log.partition("\n")
        out.append(f"<details><summary>{_e(head.rstrip(':'))}</summary>"
                   f"<pre>{html.escape(_cap(clean_text(body), REPORT_CHARS))}</pre></details>")
    _intermediates(out, r.metrics, renderer if detailed else None)
    if detailed:
        tail = log_tail(g.log, LOG_LINES, LOG_BYTES)
        if tail:
            out.append(f"<details><summary>log (last {LOG_LINES} lines)</summary>"
                       f"<pre>{html.escape(tail)}</pre></details>")
    out.append("</article>")


def render_html(doc: Mapping[str, Any], *, max_detailed: int = MAX_DETAILED, renderer=None) -> str:
    """The document as one HTML page (see the module docstring).

    ``renderer``: a ``heatmap.FigureRenderer`` to reuse across calls (made on
    first need otherwise; matplotlib is imported only when a figure is drawn).
    """
    results = results_of(doc)
    bad = failing(results)
    groups = failure_groups(bad)
    failed_labels = {r.label for r in bad}
    anchors: dict[str, str] = {}
    for i, g in enumerate(groups):
        anchors.setdefault(g.case_id, f"f{i}")

    class _Lazy:
        def __init__(self):
            self.real = renderer

        def draw(self, panels):
            if self.real is None:
                from harness.reports.heatmap import FigureRenderer
                self.real = FigureRenderer()
            return self.real.draw(panels)

    lazy = _Lazy()
    kind = kind_of(doc)
    title = "Harness report" + ("" if kind == "run" else f" ({kind})")
    if doc.get("run_id"):
        title += f": {doc['run_id']}"
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{_e(_csp())}">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
           f"<header><h1>{_e(title)}</h1></header>"]
    _summary(out, results, failed_labels)
    _provenance(out, doc)
    _flake(out, doc)
    _bisect(out, doc)
    out += slower_than_section(doc)               # a perf bisect: the first slow commit and each step
    out += latency_section(doc, results)          # a latency compare: verdicts and distributions
    _matrices(out, doc, anchors)
    _warnings(out, results)
    out.append(f'<section id="failures"><h2>Failures ({len(bad)})</h2>')
    if bad:
        out.append(f'<p class="note">{len(bad)} failing results in {len(groups)} entries: one per case and '
                   "outcome, with where it happened and a representative's details.</p>")
    if len(groups) > max_detailed:
        out.append(f'<p class="note">The first {max_detailed} entries have figures, the full report and '
                   f"the log tail; the other {len(groups) - max_detailed} have their summary and a shortened "
                   "report only (the JSON report has everything).</p>")
    for i, g in enumerate(groups):
        _case(out, g, f"f{i}", i < max_detailed, lazy)
    if not bad:
        out.append('<p class="note">No failures.</p>')
    out.append("</section>")
    out.append('<footer><p class="note">Generated by the fused-kernel harness'
               f"{' ' + _e(doc.get('harness_version')) if doc.get('harness_version') else ''}; "
               "self-contained: no network access.</p></footer>")
    out.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(out) + "\n"


def write_html(path: str | os.PathLike, doc: Mapping[str, Any], *, max_detailed: int = MAX_DETAILED,
               renderer=None) -> None:
    """Write the HTML report atomically."""
    write_text(path, render_html(doc, max_detailed=max_detailed, renderer=renderer))
