"""Latency as text: a run's timed cases (terminal), a compare's ratios (terminal and a PR's Markdown table)."""
from __future__ import annotations

from harness.formats import printable
from harness.latency.statistics import CONF, ci_label, level_of, us
from harness.outcomes import Result


def case_line(r: Result) -> str | None:
    """``case: 297.2 µs (95% CI 286.7-314.7 µs, ±4.7%, 426 samples, 0.14 GB/s)``; None when not asked for."""
    lat = r.metrics.get("latency")
    if not lat:
        return None
    where = f"{r.case_id}" + (f" @{r.ref}" if r.ref else "") + (f" (run {r.repeat})" if r.repeat else "")
    if not lat.get("measured"):
        return printable(f"{where}: latency not measured: {lat.get('why', '')}")
    extra = [f"±{100 * lat['rel_noise']:.1f}%", f"{lat['samples']} samples"]
    if lat.get("stopped_by") == "budget":
        extra[0] += " (budget spent before the target)"
    if lat.get("gb_per_s") is not None:
        extra.append(f"{lat['gb_per_s']:.3g} GB/s")
    if lat.get("fraction_of_peak") is not None:
        extra.append(f"{100 * lat['fraction_of_peak']:.0f}% of {lat['peak_gb_per_s']:.0f} GB/s peak")
    if lat.get("cold"):
        extra.append("cold")
    return printable(f"{where}: {us(lat['median_s'])} (95% CI {us(lat['ci_low_s'])}-{us(lat['ci_high_s'])}, "
                     f"{', '.join(extra)})")


def latency_lines(results: list[Result]) -> list[str]:
    return [line for line in map(case_line, results) if line]


def table_ci_label(rows: list[dict]) -> str:
    """The CI column's title: its level (``99% CI``), from the rows' verdicts; ``CI`` when they differ
    in level (each cell then says its own: ``ci_cell``)."""
    levels = {level_of(row["latency_verdict"]) for row in rows if "error" not in row["latency_verdict"]}
    return ci_label(levels.pop() if levels else CONF) if len(levels) <= 1 else "CI"


def ci_cell(v: dict, rows: list[dict]) -> str:
    """``1.020-1.310``, with its level (``(99%)``) when the table's rows differ in level."""
    text = f"{v['ci_low']:.3f}-{v['ci_high']:.3f}"
    return text + (f" ({100 * level_of(v):g}%)" if table_ci_label(rows) == "CI" else "")


def markdown_table(rows: list[dict], escape=lambda text: text) -> str:
    """The PR table: per case and ref pair, µs on each side, the ratio, its CI (99% in a compare) and
    the verdict.  ``rows``: ``{"case_id", "latency_verdict": Comparison.to_json()}`` (or with ``error``)."""
    out = [f"| case | baseline | candidate | ratio | {table_ci_label(rows)} | verdict |", "|---|---:|---:|---:|---|---|"]
    for row in rows:
        v = row["latency_verdict"]
        if "error" in v:
            out.append(f"| {escape(row['case_id'])} | | | | | {escape(v['error'])} |")
            continue
        why = escape(f" ({v['why']})") if v.get("why") else ""
        out.append(f"| {escape(row['case_id'])} | {escape(v['baseline'])}: {us(v['baseline_median_s'])} | "
                   f"{escape(v['candidate'])}: {us(v['candidate_median_s'])} | {v['ratio']:.3f}x | "
                   f"{ci_cell(v, rows)} | **{v['verdict']}**{why} |")
    return "\n".join(out) + "\n"
