"""A latency compare in the HTML report: the verdict table and, per case, every ref's samples drawn
side by side (inline SVG: box p25-p75, whiskers p5-p95, the median marked; docs/latency.md)."""
from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

import numpy as np

from harness.latency.statistics import ratio_text, us
from harness.reports.latency_text import ci_cell, table_ci_label

WIDTH, ROW, LEFT, RIGHT = 640, 26, 150, 20


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def samples_by_case(results: Sequence) -> dict[str, dict[str, list[float]]]:
    """case id → ref → every measured sample (seconds), pooled over rounds, refs in first-seen order."""
    found: dict[str, dict[str, list[float]]] = {}
    for r in results:
        lat = r.metrics.get("latency") if isinstance(r.metrics, Mapping) else None
        if isinstance(lat, Mapping) and lat.get("measured") and lat.get("samples_s"):
            found.setdefault(r.case_id, {}).setdefault(r.ref or "run", []).extend(lat["samples_s"])
    return found


def distribution_svg(case_id: str, per_ref: Mapping[str, list[float]]) -> str:
    qs = {ref: np.quantile(np.asarray(xs, float), [0.05, 0.25, 0.5, 0.75, 0.95]) for ref, xs in per_ref.items()}
    lo = min(q[0] for q in qs.values())
    hi = max(q[4] for q in qs.values())
    span = (hi - lo) or hi or 1.0
    lo, hi = lo - 0.05 * span, hi + 0.05 * span

    def x(v: float) -> float:
        return LEFT + (WIDTH - LEFT - RIGHT) * (v - lo) / (hi - lo)

    height = ROW * len(qs) + 24
    parts = [f'<svg class="latency" role="img" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}">'
             f"<title>{_e(case_id)}: samples per ref</title>"]
    for i, (ref, (p5, p25, p50, p75, p95)) in enumerate(qs.items()):
        y = 8 + i * ROW
        mid = y + ROW / 2 - 4
        parts.append(f'<text x="4" y="{mid:g}" dominant-baseline="middle">{_e(ref)} {_e(us(p50))}</text>')
        parts.append(f'<line x1="{x(p5):.1f}" x2="{x(p95):.1f}" y1="{mid:g}" y2="{mid:g}" stroke="#555"></line>')
        parts.append(f'<rect x="{x(p25):.1f}" y="{y:g}" width="{max(x(p75) - x(p25), 1):.1f}" height="{ROW - 8}" '
                     f'fill="#9cc3e6" stroke="#2a6099"></rect>')
        parts.append(f'<line x1="{x(p50):.1f}" x2="{x(p50):.1f}" y1="{y:g}" y2="{y + ROW - 8:g}" '
                     f'stroke="#000" stroke-width="2"></line>')
    axis_y = height - 6
    parts.append(f'<text x="{LEFT}" y="{axis_y}" class="axis">{_e(us(lo))}</text>'
                 f'<text x="{WIDTH - RIGHT}" y="{axis_y}" text-anchor="end" class="axis">{_e(us(hi))}</text>')
    return "".join(parts) + "</svg>"


def _verdicts(rows: list[dict]) -> list[str]:
    """The verdict table: per case and ref pair, each side's median, the ratio, its interval, the verdict."""
    out = ["<table><tr><th>case</th><th>baseline</th><th>candidate</th>"
           f"<th>ratio</th><th>{table_ci_label(rows)}</th><th>verdict</th></tr>"]
    for row in rows:
        v = row["latency_verdict"]
        if "error" in v:
            out.append(f'<tr><td class="case-id">{_e(row["case_id"])}</td><td colspan="5">{_e(v["error"])}</td></tr>')
            continue
        why = f" ({_e(v['why'])})" if v.get("why") else ""
        out.append(f'<tr><td class="case-id">{_e(row["case_id"])}</td>'
                   f'<td>{_e(v["baseline"])}: {_e(us(v["baseline_median_s"]))}</td>'
                   f'<td>{_e(v["candidate"])}: {_e(us(v["candidate_median_s"]))}</td><td>{v["ratio"]:.3f}x</td>'
                   f'<td>{_e(ci_cell(v, rows))}</td><td><b>{_e(v["verdict"])}</b>{why}</td></tr>')
    out.append("</table>")
    return out


def section(doc: Mapping[str, Any], results: Sequence) -> list[str]:
    """The ``latency`` section of a latency compare's page, [] otherwise."""
    rows = doc.get("latency")
    if not rows:
        return []
    out = ['<section id="latency"><h2>Latency</h2>'] + _verdicts(rows)
    for case_id, per_ref in samples_by_case(results).items():
        out.append(f"<figure>{distribution_svg(case_id, per_ref)}<figcaption>{_e(case_id)}: each ref's samples "
                   "over every round (box p25-p75, whiskers p5-p95, bar the median)</figcaption></figure>")
    out.append("</section>")
    return out


def slower_than_section(doc: Mapping[str, Any]) -> list[str]:
    """A perf bisect's page (``bisect --slower-than``): the first slow commit with its ratios against
    good, or the commits it is one of, or why there is none; then each step's verdict, in order."""
    found = doc.get("slower_than")
    if not found:
        return []
    out = ['<section id="slower-than"><h2>Latency bisect</h2>']
    threshold = f"slower than good {str(found['good'])[:12]} by more than {100 * found['threshold']:g}%"
    culprit = found.get("culprit")
    if culprit:
        out.append(f"<p><strong>First slow commit</strong>: <code>{_e(culprit['sha'][:12])}</code> "
                   f"{_e(culprit['subject'])} ({_e(culprit['author_date'])}), {_e(threshold)}</p>")
        out += _verdicts(culprit["latency"])
    elif found.get("first_slow"):           # stored before the culprit was recorded with its ratios
        out.append(f"<p><strong>First slow commit</strong>: <code>{_e(found['first_slow'][:12])}</code>, "
                   f"{_e(threshold)}</p>")
    elif found.get("candidates"):
        shas = ", ".join(f"<code>{_e(sha[:12])}</code>" for sha in found["candidates"])
        out.append(f"<p><strong>The first slow commit is one of</strong> {shas} ({_e(found['why'])})</p>")
    else:
        out.append(f"<p><strong>No first slow commit</strong>: {_e(found.get('why') or '')}</p>")
    steps = found.get("steps", [])
    if steps:
        out.append("<p>Steps, in the order they ran:</p><table><tr><th>commit</th><th>step</th>"
                   "<th>against good</th></tr>")
        out += [f"<tr><td><code>{_e(step['sha'][:12])}</code></td><td>{_e(step['verdict'])}</td><td>"
                + _e("; ".join(f"{row['case_id']} {ratio_text(row['latency_verdict'])}" for row in step["latency"]))
                + "</td></tr>" for step in steps]
        out.append("</table>")
    out.append("</section>")
    return out
