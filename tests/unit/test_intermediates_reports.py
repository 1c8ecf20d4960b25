"""The table of intermediates in every report format (docs/intermediates.md), from a result's metrics."""
from __future__ import annotations

import json

from harness.intermediates import table
from harness.worker.dumps_compare import Measurement, verdicts, headline, first_bad
from harness.intermediates.spec import intermediates
from harness.outcomes import Outcome, Result
from harness.document import build_document
from harness.reports.html import render_html
from harness.reports.junit import build_junit
from harness.reports.markdown import render_markdown


def _metrics(op: str = "fused_rope_decode_attention", layers: int = 0, bad: str = "k_rope",
             downstream_bad: bool = False) -> dict:
    items = intermediates(op, layers)
    at = [i.name for i in items].index(bad)
    measured = {}
    for n, i in enumerate(items):
        ok = n < at if downstream_bad else i.name != bad
        measured[i.name] = Measurement(i.name, ok, i.base == "v", "bfloat16",
                                       {"cosine": 1.0 if ok else 0.78, "max_abs": 0.0 if ok else 3.5, "max_rel": 0.01,
                                        "over_0.001": 0.6, "over_0.005": 0.0 if ok else 0.8,
                                        "bad_ratio": 0.0 if ok else 0.55},
                                       _loc(i, ok))
    rows = verdicts(items, measured)
    return {"intermediates": {"first_bad_intermediate": first_bad(rows).name, "headline": headline(rows),
                              "rows": [r.to_json() for r in rows], "problems": [], "notes": []}}


def _loc(item, ok: bool) -> dict:
    """Per-head localisation of a 4-query-head, 2-KV-head case: a bad one is bad in KV head 1."""
    if item.axes[1] == "kv_head":
        return {"row": (0.0, 0.0), "kv_head": (0.0, 0.0)} if ok else {"row": (1.0, 1.0), "kv_head": (0.0, 1.0)}
    if item.axes[1] == "head":
        return {"row": (0.0, 0.0), "head": (0.0,) * 4}
    return {"row": (0.0, 0.0)}


def _doc(metrics: dict) -> dict:
    r = Result("fused[batch=4]", Outcome.MISMATCH, op="fused_rope_decode_attention", summary="out: bad; first bad "
               "intermediate k_rope", report="out: MISMATCH ...", metrics=metrics)
    return build_document([r], started=0.0, devices=["cpu"], command=["harness"])


def test_json_junit_markdown_html_each_carry_the_table():
    doc = _doc(_metrics())
    (result,) = json.loads(json.dumps(doc))["results"]
    assert result["first_bad_intermediate"] == "k_rope"
    assert [(r["name"], r["verdict"]) for r in result["intermediates"]][3:5] == [("k_rope", "bad"), ("v", "bit-exact")]
    xml = build_junit(doc).tostring().decode()
    assert 'name="first_bad_intermediate" value="k_rope"' in xml
    assert "--- intermediates ---" in xml and "k_rope        bad" in xml
    md = render_markdown(doc).replace("\\", "")     # Markdown escapes . and the like
    assert "| k_rope | bad | 0.780000 | - | 3.5 | 0.01 | 600.0‰ | 800.0‰ | 55.0% | 2/2 rows; kv_head [1] |" in md
    html = render_html(doc)
    assert '<tr class="verdict-bad"><td>k_rope</td><td>bad</td>' in html
    assert "intermediates: first bad intermediate k_rope" in html


def test_a_long_table_keeps_the_bad_layer_and_counts_the_rest():
    found = _metrics("decode_layers", 10, bad="layers.6.attn", downstream_bad=True)["intermediates"]
    shown, note = table.rows(found)
    names = [row[0] for row in shown]
    assert "layers.6.q_norm" in names and "layers.6.attn" in names and "final_norm" in names
    assert "layers.0.q_norm" not in names
    assert note.startswith(f"{len(found['rows']) - len(shown)} more not shown: ")
    assert "layers.6.attn" in table.text(found)


def test_html_draws_the_intermediate_by_head_map():
    found = _metrics(bad="k_rope")["intermediates"]
    grid = table.head_map(found)
    # k_rope's KV head 1 (bad) is read by query heads 2 and 3 (4 query heads over 2 KV heads)
    k_rope = grid["ratio"][grid["names"].index("k_rope")]
    assert grid["size"] == [6, 4] and k_rope == [0.0, 0.0, 1.0, 1.0]
    assert grid["names"] == ["q_norm", "k_norm", "q_rope", "k_rope", "v", "attn"]
    html = render_html(_doc(_metrics()))
    assert "intermediates: bad-element ratio per intermediate x query head" in html


def test_no_map_when_nothing_is_bad():
    found = _metrics(bad="k_rope")["intermediates"]
    for r in found["rows"]:
        r["verdict"] = "ok"
    assert table.head_map(found) is None
