"""The audit document (``harness.audit.session.Audit.document``) as terminal text, Markdown, JSON and HTML.

Survivors come first everywhere: they are what a reader has to act on.  The kill
matrix is compact: one row per mutant, one character per case (``K`` killed there,
``.`` ran and passed, ``-`` not applicable, ``x`` the unmutated kernel already failed).
In Markdown the case ids (from case files) and outcome labels (codes a kernel's runtime
printed) go through ``escape``: neither may break a table or become HTML.  The rest
is the harness's own text (operator names, reasons, conditions).
"""
from __future__ import annotations

import html
import json
import os
from typing import Any

from harness.files import write_text
from harness.formats import pct
from harness.reports.markdown import escape, fenced


def _survivors(doc: dict) -> list[dict]:
    return [m for m in doc["mutants"] if m["applicable"] and not m["killed"]]


def _killed(doc: dict) -> list[dict]:
    return [m for m in doc["mutants"] if m["killed"]]


def _inapplicable(doc: dict) -> list[dict]:
    return [m for m in doc["mutants"] if not m["applicable"]]


def kill_matrix(doc: dict) -> list[tuple[str, str]]:
    """``(mutant, row)``: one character per case, in the unmutated run's order."""
    ids = list(doc["baseline"])
    rows = []
    for m in doc["mutants"]:
        killers, ran = set(m["killed_by"]), set(m["cases"])
        cells = []
        for i in ids:
            if i not in ran:
                cells.append("-")
            elif i in killers:
                cells.append("K")
            elif doc["baseline"][i] not in ("PASS", "NEAR_TIE"):
                cells.append("x")
            else:
                cells.append(".")
        rows.append((m["name"], "".join(cells)))
    return rows


def delta_line(doc: dict) -> str | None:
    """How far ``head_perturbed`` scaled one head, and where that delta came from (None: not run)."""
    d = doc.get("head_perturbed_delta")
    if not d or not d["by_op"]:
        return None
    if d["source"] == "--delta":
        return f"head_perturbed scaled one head by 1 + {pct(d['delta'])} (--delta)"
    per_op = ", ".join(f"{op} {pct(x)}" for op, x in d["by_op"].items())
    return f"head_perturbed scaled one head by 1 + delta, per op the smallest delta the sensitivity search saw detected: {per_op}"


# harness/audit/coverage.py: the conditions are the builtin ops' own
NO_CONDITIONS = "no boundary condition applies (they are the builtin ops' slots, pages and lengths; spec ops only)"


def _score_line(doc: dict) -> str:
    return f"score {pct(doc['score'])}: {doc['killed']} of {doc['applicable']} applicable mutants killed"


def render_text(doc: dict) -> str:
    lines = [_score_line(doc)]
    for m in _survivors(doc):
        lines.append(f"  SURVIVED {m['name']} ({m['bug']}): {m['reason']}")
    for m in _killed(doc):
        first = m["killed_by"][0]
        lines.append(f"  killed   {m['name']} by {len(m['killed_by'])} case(s), first {first} "
                     f"({m['killing_outcomes'][first]})")
    for m in _inapplicable(doc):
        lines.append(f"  n/a      {m['name']}: no case of an op it applies to")
    if delta_line(doc):
        lines.append(delta_line(doc))
    missed = [c for c in doc["coverage"] if not c["covered"]]
    lines.append(f"coverage: {sum(c['covered'] for c in doc['coverage'])} of {len(doc['coverage'])} "
                 f"boundary conditions exercised" if doc["coverage"] else f"coverage: {NO_CONDITIONS}")
    for c in missed:
        lines.append(f"  missed   {c['name']}: {c['description']}")
    for x in doc.get("sensitivity") or ():
        lines.append(f"sensitivity: {x['text']}")
    width = max((len(name) for name, _ in kill_matrix(doc)), default=0)
    lines.append(f"kill matrix ({len(doc['baseline'])} cases; K killed, . passed, x already failing, - n/a):")
    lines += [f"  {name:<{width}} {row}" for name, row in kill_matrix(doc)]
    return "\n".join(lines) + "\n"


def render_markdown(doc: dict) -> str:
    e = escape
    out = [f"## Audit: {_score_line(doc)}", ""]
    survivors = _survivors(doc)
    if survivors:
        out += ["### Survivors", "", "| mutant | bug class | why it survived |", "|---|---|---|"]
        out += [f"| `{m['name']}` | {m['bug']} | {m['reason']} |" for m in survivors]
        out.append("")
    out += ["### Killed", "", "| mutant | killed by | first case (outcome) |", "|---|---|---|"]
    out += [f"| `{m['name']}` | {len(m['killed_by'])} case(s) | {e(m['killed_by'][0])} "
            f"({e(m['killing_outcomes'][m['killed_by'][0]])}) |" for m in _killed(doc)]
    if _inapplicable(doc):
        out += ["", "Not applicable (no case of an op they apply to): "
                + ", ".join(f"`{m['name']}`" for m in _inapplicable(doc))]
    if delta_line(doc):
        out += ["", delta_line(doc)]
    out += ["", "### Coverage", ""]
    if doc["coverage"]:
        out += ["| boundary condition | cases |", "|---|---|"]
        out += [f"| {c['description']} | {len(c['cases']) or '**missed**'} |" for c in doc["coverage"]]
    else:
        out.append(NO_CONDITIONS[0].upper() + NO_CONDITIONS[1:] + ".")
    if doc.get("sensitivity"):
        out += ["", "### Sensitivity", ""] + [f"- {x['text']}" for x in doc["sensitivity"]]
    width = max((len(name) for name, _ in kill_matrix(doc)), default=0)
    out += ["", "<details><summary>Kill matrix</summary>", "",
            fenced("\n".join(f"{name:<{width}} {row}" for name, row in kill_matrix(doc)), info=""),
            "", "</details>", ""]
    return "\n".join(out)


def render_html(doc: dict) -> str:
    e = html.escape
    rows = "".join(f"<tr><td><code>{e(m['name'])}</code></td><td>{e(m['bug'])}</td>"
                   f"<td>{'killed' if m['killed'] else 'n/a' if not m['applicable'] else 'SURVIVED'}</td>"
                   f"<td>{e(m['reason'] or ', '.join(m['killed_by'][:3]))}</td></tr>"
                   for m in _survivors(doc) + _killed(doc) + _inapplicable(doc))
    cover = "".join(f"<tr><td>{e(c['description'])}</td><td>{len(c['cases']) or '<b>missed</b>'}</td></tr>"
                    for c in doc["coverage"])
    matrix = e("\n".join(f"{name} {row}" for name, row in kill_matrix(doc)))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>harness audit</title></head><body>"
            f"<h1>Audit</h1><p>{e(_score_line(doc))}</p>"
            f"<table border='1'><tr><th>mutant</th><th>bug class</th><th>verdict</th><th>why / killed by</th></tr>"
            f"{rows}</table><h2>Coverage</h2><table border='1'><tr><th>boundary condition</th><th>cases</th></tr>"
            f"{cover}</table>"
            + (f"<p>{e(delta_line(doc))}</p>" if delta_line(doc) else "")
            + "".join(f"<p>{e(x['text'])}</p>" for x in doc.get("sensitivity") or ())
            + f"<h2>Kill matrix</h2><pre>{matrix}</pre></body></html>\n")


def render_json(doc: dict) -> str:
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


RENDERERS = {"json": render_json, "markdown": render_markdown, "html": render_html}


def is_audit_document(doc: Any) -> bool:
    """Whether ``doc`` is what ``Audit.document()`` writes (``harness report`` renders it as an audit)."""
    return isinstance(doc, dict) and doc.get("kind") == "audit" and isinstance(doc.get("mutants"), list)


def write_audit(path: str | os.PathLike, fmt: str, doc: dict[str, Any]) -> None:
    write_text(path, RENDERERS[fmt](doc))
