"""Markdown for PR comments and CI summaries (GitHub / GitLab flavoured).

Sections, in order: a provenance header (devices with torch / torch-npu /
CANN / CUDA versions, host, harness, refs with short shas and subjects, the
relevant environment), counts per outcome label, one table per matrix in the
layout engineers paste (``| case | upstream 68889bc | fix 65ae4d5 |`` with
cells ``0/5 PASS, 5/5 FAIL_507018 (ACL_ERROR_RT_AICORE_EXCEPTION)``), the
flake statistics when the document has them, and a collapsed ``<details>`` list
of failures, one entry per case and label (``×8`` and where they happened) with
a representative's one-line summary and log and, for the first few, the head of
its comparison report and the tail of its log in fenced blocks.

Escaping: every string that comes from a case file, a kernel, a log or the
environment goes through ``escape`` (inline text: backslash before Markdown
punctuation, ``&``/``<``/``>`` as entities, newlines and ``|`` made harmless,
so it can neither break a table row nor become HTML) or into a fenced block
whose fence is longer than any backtick run inside it.  Output is capped at
``MAX_CHARS`` (GitHub refuses comments over 65,536 characters); what is left
out is said.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from harness.formats import blocking_rerun_text, device_log_text, inputs_text
from harness.logs import clean_text, log_tail
from harness.latency.statistics import ratio_text
from harness.reports.latency_text import markdown_table
from harness.flake.changes import decide_text
from harness.document import kind_of, results_of
from harness.document.failures import FailureGroup, failing, failure_groups, result_warnings
from harness.document.sections import FLAKE_COLUMNS, flake_confidence, flake_rows, provenance_items
from harness.document.table import label_counts, outcome_table, totals_text
from harness.intermediates import table as intermediates_table

__all__ = ["MAX_CHARS", "escape", "fenced", "render_markdown"]

MAX_CHARS = 60_000
FULL_TABLE_ROWS = 50          # larger matrices list only the rows that did not pass everywhere
LISTED_FAILURES = 200         # entries (case and label) in the <details> list
EXCERPTS = 10                 # failures that also get report / log excerpts
EXCERPT_REPORT_LINES = 20
EXCERPT_LOG_LINES = 12
INLINE_CHARS = 400

# Characters with a meaning in inline Markdown (CommonMark + GFM tables,
# strikethrough and math); a backslash makes each one literal.
_PUNCT = re.compile(r"([\\`*_\[\]{}()#+\-.!|~$:@])")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def escape(text: Any, limit: int | None = INLINE_CHARS) -> str:
    """One line of literal inline text: safe in a table cell, a list item or a heading."""
    text = " ".join(clean_text(text).split())          # newlines, tabs, runs of spaces
    if limit is not None and len(text) > limit:
        text = text[:limit] + "..."
    text = _PUNCT.sub(r"\\\1", text)
    return "".join(_ENTITIES.get(ch, ch) for ch in text)


def fenced(text: str, info: str = "text") -> str:
    """A fenced code block that no content can close early."""
    text = clean_text(text)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def _table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> list[str]:
    align = align or ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _header(doc: Mapping[str, Any], results) -> list[str]:
    kind = kind_of(doc)
    title = "Harness report" if kind == "run" else f"Harness {escape(kind)} report"
    lines = [f"## {title}", "", f"**{len(results)} results**: {escape(totals_text(results))}", ""]
    for key, value in provenance_items(doc):
        if key == "kind":
            continue
        lines.append(f"- **{escape(key)}**: {escape(value)}")
    return lines


def _counts(results) -> list[str]:
    counts = label_counts(results)
    if not counts:
        return ["_No results._"]
    return _table(["outcome", "results"], [[escape(k), str(v)] for k, v in counts.items()],
                  ["---", "---:"])


def _matrices(doc: Mapping[str, Any]) -> list[str]:
    table = outcome_table(doc)
    lines: list[str] = []
    verdicts = {row["case_id"]: row for row in doc.get("compare") or []}   # harness compare: baseline vs candidate
    header = ["case"] + [escape(c.title) for c in table.columns] + (["verdict"] if verdicts else [])
    for matrix, rows in table.matrices:
        lines += ["", f"### {escape(matrix)}", ""]
        shown = list(rows)
        if len(rows) > FULL_TABLE_ROWS:
            shown = [r for r in rows if any(r.cell(c.key).status != "pass" for c in table.columns)]
        body = [[escape(r.case_id)] + [escape(r.cell(c.key).text) for c in table.columns]
                + ([_verdict(verdicts.get(r.case_id))] if verdicts else []) for r in shown]
        if body:
            lines += _table(header, body)
        hidden = len(rows) - len(shown)
        if hidden:
            lines += ["", f"_{hidden} more cases passed everywhere and are not listed._"]
    return lines


def _latency(doc: Mapping[str, Any]) -> list[str]:
    """A latency compare's PR table (harness/reports/latency_text.py): µs per side, ratio, CI, verdict."""
    rows = doc.get("latency")
    if not rows:
        return []
    return ["", "### Latency", "", markdown_table(rows, escape).rstrip("\n")]


def _verdict(row: Mapping[str, Any] | None) -> str:
    if not row or not row.get("verdict"):
        return ""
    decide = decide_text(row.get("runs_to_decide")) if row["verdict"] == "flaky" else ""
    return escape(f"{row['verdict']} (Fisher p = {row.get('p_value', 1.0):.3g}" + (f"; {decide})" if decide else ")"))


def _failing_everywhere(doc: Mapping[str, Any]) -> list[str]:
    """A compare's command cases that failed on every run of every ref, with what they printed."""
    rows = [row for row in doc.get("compare") or [] if row.get("failure")]
    if not rows:
        return []
    lines = ["", "### Failing on every ref", ""]
    for row in rows:
        lines += [f"**{escape(row['case_id'])}** printed:", "", fenced(row["failure"]), ""]
    return lines


def _bisect(doc: Mapping[str, Any]) -> list[str]:
    report = doc.get("bisect")
    if not report:
        return []
    from harness.reports.bisect_text import TALLY_COLUMNS, failing_lines, headline, p_parts, tally_rows
    lines = ["", "### Bisect", ""]
    label, culprit, tail = headline(report)
    if culprit:
        sha, subject, date = culprit
        lines.append(f"**{escape(label)}**: `{escape(sha)}` {escape(subject)} ({escape(date)}){tail}")
    else:
        lines.append(f"**{escape(label)}**{tail}")
    for line in failing_lines(report):              # the tests failing at the culprit and at bad, the warning
        lines += ["", escape(line)]
    failure = report.get("failure")
    if failure:         # a command's FAILED says nothing of why: what it printed does
        lines += ["", f"{escape(failure['label'])} of {escape(failure['case_id'])} at `{escape(failure['ref'])}` "
                      f"printed:", "", fenced(failure["text"])]
    for seen in report.get("also_seen") or []:      # failures other than the signature: a finding
        where = "..".join(dict.fromkeys((seen["first"][:12], seen["last"][:12])))
        before = (f"; before the first bad commit too (`{'..'.join(dict.fromkeys(s[:12] for s in seen['before']))}`):"
                  f" another bug" if seen.get("before") else "")
        lines += ["", f"Also seen: **{escape(seen['label'])}** at `{where}` (commits "
                      f"{seen['first_index']}..{seen['last_index']}; {seen['runs']} runs){before}"]
    p = p_parts(report)
    if p:
        lines += ["", f"Signature {escape(p[0])}{p[1]}"]
    rows = [[escape(sha), runs, sightings, posterior, escape(subject)]
            for sha, runs, sightings, posterior, subject in tally_rows(report)]
    if rows:
        lines += [""] + _table(TALLY_COLUMNS, rows)
    return lines


def _slower_than(doc: Mapping[str, Any]) -> list[str]:
    """A perf bisect (``bisect --slower-than``): the first slow commit with its ratios against good,
    the range skips left or why there is none, and each step's verdict."""
    found = doc.get("slower_than")
    if not found:
        return []
    lines = ["", "### Latency bisect", ""]
    culprit = found.get("culprit")
    threshold = f"slower than good `{escape(str(found['good'])[:12])}` by more than {100 * found['threshold']:g}%"
    if culprit:
        lines += [f"**First slow commit**: `{escape(culprit['sha'][:12])}` {escape(culprit['subject'])} "
                  f"({escape(culprit['author_date'])}), {threshold}", "",
                  markdown_table(culprit["latency"], escape).rstrip("\n")]
    elif found.get("first_slow"):           # stored before the culprit was recorded with its ratios
        lines.append(f"**First slow commit**: `{escape(found['first_slow'][:12])}`, {threshold}")
    elif found.get("candidates"):
        lines.append(f"**The first slow commit is one of** "
                     f"{', '.join(f'`{escape(sha[:12])}`' for sha in found['candidates'])} ({escape(found['why'])})")
    else:
        lines.append(f"**No first slow commit**: {escape(found.get('why') or '')}")
    steps = [[f"`{escape(step['sha'][:12])}`", escape(step["verdict"]),
              escape("; ".join(f"{row['case_id']} {ratio_text(row['latency_verdict'])}" for row in step["latency"]))]
             for step in found.get("steps", [])]
    if steps:
        lines += ["", "Steps, in the order they ran:", ""] + _table(["commit", "step", "against good"], steps)
    return lines


def _flake(doc: Mapping[str, Any]) -> list[str]:
    rows = flake_rows(doc)
    if not rows:
        return []
    conf = flake_confidence(doc)
    header = [escape(c if c not in ("Wilson", "exact (Clopper-Pearson)") else f"{c} {conf}")
              for c in FLAKE_COLUMNS]
    return ["", "### Flake statistics", ""] + _table(header, [[escape(v) for v in row] for row in rows])


def _warnings(results) -> list[str]:
    """What results say the user must know that is not a failure (``Result.warnings``), once each."""
    warned = result_warnings(results)
    if not warned:
        return []
    return ["", "### Warnings on results", ""] + [f"- {escape(case_id)}: {escape(text)}" for case_id, text in warned]


def _entry(g: FailureGroup) -> list[str]:
    """``- **CRASH** ×8 case (npu:0, repeats 0-7, seed 1): summary`` and its log line."""
    times = f" {g.times}" if g.times else ""
    text = escape(g.first.summary)
    if not g.same_summary and g.detail:
        text += f" \\(all {g.count}: {escape(g.detail)}\\)"
    lines = [f"- **{escape(g.label)}**{times} {escape(g.case_id)} ({escape(g.where)}): {text}"]
    if g.log:
        others = f"; other logs {escape(g.other_logs)}" if g.other_logs else ""
        lines.append(f"  - log: {escape(g.log, limit=None)}{others}")
    inputs = inputs_text(g.first.metrics)
    if inputs:
        lines.append(f"  - inputs: {escape(inputs)}")
    rerun = blocking_rerun_text(g.first.metrics)
    if rerun:
        lines.append(f"  - {escape(rerun)}")
    device_log = device_log_text(g.first.metrics)
    if device_log:        # its first error lines: the rest is in the JSON, JUnit and HTML
        head, _, body = device_log.partition("\n")
        lines.append(f"  - {escape(head)} {escape(' | '.join(body.splitlines()[:2]), limit=400)}")
    return lines


def _intermediates(metrics: Mapping[str, Any]) -> list[str]:
    """The table of intermediates of a failing case (docs/intermediates.md), or nothing."""
    dumped = intermediates_table.data(metrics)
    if not dumped:
        return []
    body, note = intermediates_table.rows(dumped)
    lines = ["", f"Intermediates: {escape(dumped.get('headline', ''))}", "",
             *_table(intermediates_table.HEADER, [[escape(c) for c in row] for row in body])]
    return lines + ([f"", f"_{escape(note)}_"] if note else [])


def _failures(results, budget: int) -> list[str]:
    bad = failing(results)
    if not bad:
        return []
    groups = failure_groups(bad)
    budget -= 200             # the closing note and tag, always written
    lines = ["", "<details>", f"<summary>Failing cases ({len(bad)})</summary>", "",
             f"_{len(bad)} failing results: one entry per case and outcome ({len(groups)})._", ""]
    used = sum(len(x) + 1 for x in lines)
    listed = 0
    for g in groups[:LISTED_FAILURES]:
        entry = _entry(g)
        size = sum(len(x) + 1 for x in entry)
        if used + size > budget:
            break
        lines += entry
        used += size
        listed += 1
    if listed < len(groups):
        lines += ["", f"_{len(groups) - listed} more failing cases are not listed here "
                      "(see the JSON, JUnit or HTML report)._"]
    seen = set()
    for g in groups[:listed]:
        if len(seen) >= EXCERPTS:
            break
        r = g.first
        key = (r.case_id, r.label, r.report)
        if key in seen:
            continue
        seen.add(key)
        body = []
        if r.report:
            report_lines = clean_text(r.report).splitlines()
            body.append("\n".join(report_lines[:EXCERPT_REPORT_LINES])
                        + (f"\n... ({len(report_lines) - EXCERPT_REPORT_LINES} more lines)"
                           if len(report_lines) > EXCERPT_REPORT_LINES else ""))
        tail = log_tail(r.log, lines=EXCERPT_LOG_LINES, max_bytes=2048)
        if tail:
            body.append(f"--- last lines of the log ---\n{tail}")
        if not body:
            continue
        times = f" {g.times}" if g.times else ""
        block = ["", f"**{escape(r.label)}**{times} {escape(r.case_id)} ({escape(g.where)})", "",
                 fenced("\n\n".join(body)), *_intermediates(r.metrics)]
        size = sum(len(x) + 1 for x in block)
        if used + size > budget:
            break
        lines += block
        used += size
    lines += ["", "</details>"]
    return lines


def render_markdown(doc: Mapping[str, Any], *, max_chars: int = MAX_CHARS) -> str:
    """The document as Markdown (see the module docstring); at most ``max_chars`` characters."""
    results = results_of(doc)
    head = _header(doc, results) + [""] + _counts(results)
    # a bisect's steps would make one column per commit: its tally (or steps) table says it better
    body = (_bisect(doc) + _slower_than(doc) + _latency(doc)
            + ([] if doc.get("bisect") or doc.get("slower_than") else _matrices(doc)) + _failing_everywhere(doc)
            + _flake(doc) + _warnings(results))
    text = "\n".join(head + body)
    note = "\n\n_Tables cut here to fit a comment; the JSON, JUnit and HTML reports have everything._"
    if len(text) > max_chars:
        # Cut whole lines, never a table row in half.
        keep, size = [], len(note)
        for line in head + body:
            if size + len(line) + 1 > max_chars:
                break
            keep.append(line)
            size += len(line) + 1
        return "\n".join(keep) + note + "\n"
    failures = _failures(results, max_chars - len(text) - 2)
    return text + "\n" + "\n".join(failures) + "\n"
