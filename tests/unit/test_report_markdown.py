"""Markdown report, and the shared document helpers it renders (outcome table, logs, text).

Escaping is checked twice: on the text (no unescaped Markdown punctuation, no
raw ``<``) and through a CommonMark + GFM-tables parser (markdown-it-py, which
rich brings): no user text becomes an HTML element, no table row breaks.
"""
from __future__ import annotations

import json
import re

import pytest

from harness.document import build_document, load_document, results_of
from harness.document.table import cell_text, outcome_table
from harness.outcomes import Outcome, Result
from harness.logs import clean_text, log_tail
from harness.reports.json_report import write_document
from harness.reports.markdown import escape, fenced, render_markdown
from report_samples import NASTY_ID, flake_summary, sample_document

NASTY = [NASTY_ID, "a|b", "`x`", "<script>alert(1)</script>", "line1\nline2\r\nline3", "*bold* _it_",
         "[link](http://example.com)", "![img](x.png)", "&amp; &lt;", "~~strike~~", "$x^2$", "# heading",
         "back\\slash|pipe", "\x1b[31mred\x1b[0m\x00", "- item", "1. item", "> quote", "@someone"]


def _markdown_it():
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"])


def _unescaped(text: str, chars: str) -> list[str]:
    """Characters of ``chars`` in ``text`` not preceded by an escaping backslash."""
    found, i = [], 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] in chars:
            found.append(text[i])
        i += 1
    return found


# -- escaping --------------------------------------------------------------------------

@pytest.mark.parametrize("text", NASTY)
def test_escape_leaves_nothing_active(text):
    out = escape(text)
    assert "\n" not in out and "\r" not in out and "<" not in out and ">" not in out
    assert not _unescaped(out, "|`*_[]~$!#")
    assert "\x1b" not in out and "\x00" not in out


@pytest.mark.parametrize("text", NASTY)
def test_escaped_text_renders_as_itself(text):
    md = _markdown_it()
    html = md.render(f"| {escape(text)} |\n| --- |\n| {escape(text)} |\n")
    assert html.count("<td>") == 1 and html.count("<th>") == 1
    assert "<script" not in html and "<a " not in html and "<img" not in html and "<em>" not in html
    assert "<strong>" not in html and "<code>" not in html and "<s>" not in html and "<del>" not in html
    cell = re.search(r"<td>(.*)</td>", html, re.S).group(1)
    import html as htmllib
    assert htmllib.unescape(cell) == " ".join(clean_text(text).split())


def test_fenced_cannot_be_closed_early():
    body = "```\n````\n<script>x</script>\n~~~"
    block = fenced(body)
    fence = block.split("\n", 1)[0].rstrip("text")
    assert len(fence) == 5
    inner = block.split("\n")[1:-1]
    assert not any(re.fullmatch(r"`{5,}\s*", line) for line in inner)
    html = _markdown_it().render(block)
    assert html.count("<pre>") == 1 and "<script>" not in html


# -- the document --------------------------------------------------------------------------

def test_render_sections(tmp_path):
    text = render_markdown(sample_document(tmp_path, flake=flake_summary()))
    assert text.startswith("## Harness compare report\n")
    assert "**17 results**: 5 passed, 11 failed, 1 skipped" in text
    # provenance: devices with versions, refs with short shas and subjects, env
    assert "torch 2\\.1\\.0, torch\\-npu 2\\.1\\.0\\.post3, CANN 8\\.0\\.RC1" in text
    assert "68889bc upstream head" in text and "65ae4d5 fix\\: add the missing barrier &lt;b&gt;" in text
    assert "**env PTO2\\_RING\\_HEAP**: 1073741824" in text
    # the engineers' table
    assert "| case | upstream 68889bc | fix 65ae4d5 |" in text
    assert ("| decode\\-rope\\-kv\\[batch=16,seq\\_lens=uniform\\(1,3756\\),slot\\_mode=arange,seed=1234\\] "
            "| 0/5 PASS, 5/5 FAIL\\_507018 \\(ACL\\_ERROR\\_RT\\_AICPU\\_EXCEPTION\\) | 5/5 PASS |") in text
    # counts, flake, failures
    assert "| FAIL\\_507018 | 5 |" in text
    assert "### Flake statistics" in text and "15\\.0% \\(3/20\\)" in text and "\\[5\\.2%, 36\\.0%\\]" in text
    assert "NONDETERMINISTIC" in text
    assert "<details>\n<summary>Failing cases (11)</summary>\n\n" in text
    assert "- **HANG** hang\\-case\\[x=1\\] (npu\\:0, ref fix, repeat 0): timed out after 60 s" in text


def test_rendered_markdown_has_no_html_from_data_and_intact_tables(tmp_path):
    text = render_markdown(sample_document(tmp_path, flake=flake_summary()))
    # Outside fenced blocks the only tags are ours.
    in_fence = None
    for line in text.splitlines():
        m = re.match(r"(`{3,})", line)
        if m and (in_fence is None or m.group(1) == in_fence):
            in_fence = None if in_fence else m.group(1)
            continue
        if in_fence is None and "<" in line:
            assert line in ("<details>", "</details>") or re.fullmatch(r"<summary>[^<>]*</summary>", line)
    html = _markdown_it().render(text)
    assert "<script" not in html and "<b>" not in html and "<a " not in html
    assert html.count("<details>") == 1
    # Every body row has as many cells as its header.
    for table in re.findall(r"<table>.*?</table>", html, re.S):
        header = len(re.findall(r"<th[ >]", table))
        rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]
        assert rows and all(len(re.findall(r"<td[ >]", row)) == header for row in rows)
    # The log's script and fence breaker stay inside a code block.
    assert "&lt;/pre&gt;&lt;script&gt;alert('log')&lt;/script&gt;" in html


def test_repeated_identical_failures_get_one_excerpt(tmp_path):
    text = render_markdown(sample_document(tmp_path))
    assert text.count("RuntimeError: ACL error 507018") == 1


def test_large_documents_fit_a_comment(tmp_path):
    results = [Result(f"big[i={i}]", Outcome.PASS, matrix="big", device="cpu") for i in range(4000)]
    results += [Result(f"big[i=x{i}]", Outcome.MISMATCH, matrix="big", device="cpu", summary="s" * 300,
                       report="r\n" * 100) for i in range(400)]
    doc = build_document(results, started=0.0, devices=["cpu"], command=["harness"])
    text = render_markdown(doc)
    assert len(text) <= 60_000
    assert "4000 more cases passed everywhere and are not listed" in text
    assert "big\\[i=x0\\]" in text
    assert "more failing cases are not listed here" in text
    small = render_markdown(doc, max_chars=5_000)
    assert len(small) <= 5_000 and "cut here" in small
    rows = [line for line in small.splitlines() if line.startswith("|")]
    assert rows and all(len(_unescaped(line, "|")) == 3 for line in rows)


def test_plain_run_has_one_column(tmp_path):
    results = [Result("m[a=1]", Outcome.PASS, matrix="m", device="cpu", repeat=i) for i in range(3)]
    doc = build_document(results, started=0.0, devices=["cpu"], command=["harness"])
    text = render_markdown(doc)
    assert "| case | cpu |" in text and "| m\\[a=1\\] | 3/3 PASS |" in text
    assert "<details>" not in text


# -- shared helpers ---------------------------------------------------------------------------

def test_cell_text_order():
    assert cell_text({"PASS": 5}) == "5/5 PASS"
    assert cell_text({"FAIL_507018": 5}) == "0/5 PASS, 5/5 FAIL_507018"
    assert cell_text({"HANG": 1, "PASS": 2, "FAIL_507018": 2, "MISMATCH": 2}) == \
        "2/7 PASS, 2/7 FAIL_507018, 2/7 MISMATCH, 1/7 HANG"
    assert cell_text({}) == "-"


def test_outcome_table_by_ref(tmp_path):
    table = outcome_table(sample_document(tmp_path))
    assert table.by == "ref"
    assert [c.title for c in table.columns] == ["upstream 68889bc", "fix 65ae4d5"]
    assert [m for m, _ in table.matrices] == ["decode-rope-kv", "paged-attn", "evil|matrix"]
    row = table.matrices[0][1][0]
    assert row.cell("upstream").text == "0/5 PASS, 5/5 FAIL_507018 (ACL_ERROR_RT_AICPU_EXCEPTION)"
    assert row.cell("fix").text == "5/5 PASS" and row.cell("fix").status == "pass"
    assert row.cell("upstream").status == "fail" and row.differs
    assert row.labels == ["FAIL_507018", "PASS"]
    skipped = next(r for r in table.rows if r.case_id == "skipped-case[x=1]")
    assert skipped.cell("fix").status == "skip" and skipped.cell("upstream").status == "empty"


def test_outcome_table_by_device_and_single():
    results = [Result("m[a=1]", Outcome.PASS, matrix="m", device="npu:0"),
               Result("m[a=1]", Outcome.DEVICE_FAULT, code=507018, matrix="m", device="npu:1"),
               Result("n[a=1]", Outcome.NEAR_TIE, matrix="n", device="npu:1")]
    table = outcome_table(results)
    assert table.by == "device" and [c.key for c in table.columns] == ["npu:0", "npu:1"]
    first = table.rows[0]
    assert first.cell("npu:0").text == "1/1 PASS" and first.cell("npu:1").text == "0/1 PASS, 1/1 FAIL_507018"
    assert table.rows[1].cell("npu:1").text == "1/1 PASS (0 clean, 1 near-tie)"     # a near-tie is a pass
    assert table.rows[1].cell("npu:1").status == "pass"
    single = outcome_table([Result("m[a=1]", Outcome.PASS, device="cpu", repeat=i) for i in range(2)])
    assert single.by == "single" and single.columns[0].title == "cpu"
    assert single.rows[0].matrix == "m" and single.rows[0].cell("").text == "2/2 PASS"


def test_refs_from_results_only():
    results = [Result("m[a=1]", Outcome.PASS, ref="a"), Result("m[a=1]", Outcome.HANG, ref="b")]
    table = outcome_table(results)
    assert table.by == "ref" and [c.title for c in table.columns] == ["a", "b"]


def test_load_document_and_results_of(tmp_path):
    doc = build_document([Result("m[a=1]", Outcome.MISMATCH, ref="fix")], started=0.0, devices=["cpu"],
                         command=["h"])
    doc["results"][0]["future_key"] = 1
    write_document(tmp_path / "d.json", doc)
    loaded = load_document(tmp_path / "d.json")
    (r,) = results_of(loaded)
    assert r.outcome is Outcome.MISMATCH and r.ref == "fix"
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ValueError, match="bad.json"):
        load_document(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text(json.dumps([1]))
    with pytest.raises(ValueError, match="no \"results\""):
        load_document(tmp_path / "list.json")


def test_log_tail(tmp_path):
    assert log_tail(None) is None and log_tail(tmp_path / "missing") is None
    p = tmp_path / "a.log"
    p.write_bytes(b"one\ntwo\r\nthree\x1b[1mbold\x1b[0m\xff\n")
    assert log_tail(p) == "one\ntwo\nthreebold\ufffd"
    p.write_text("".join(f"{i}\n" for i in range(100)))
    assert log_tail(p, lines=3) == "97\n98\n99"
    cut = log_tail(p, lines=100, max_bytes=20)
    assert cut.splitlines()[-1] == "99" and len(cut) <= 20 and "\n" in cut


def test_clean_text():
    assert clean_text("a\x00b\x1b[31mc\x1b[0m\rd\x7f") == "a\\x00bc\nd\\x7f"
    assert clean_text("ok\ttab\n") == "ok\ttab\n"
    assert clean_text("\ud800") == "\\ud800"
