"""The one-file HTML report and its localisation figures (no browser: see tests/e2e/test_report_browser.py)."""
from __future__ import annotations

import base64
import hashlib
import io
import re
import sys
from html.parser import HTMLParser

import numpy as np
import pytest

from harness.outcomes import Outcome, Result
from harness.reports.heatmap import MAX_PAGES, FigureRenderer, panels_for
from harness.reports.html import render_html, write_html
from harness.document import build_document
from report_samples import NASTY_ID, cache_metrics, flake_summary, mismatch_metrics, sample_document

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """Tags, attributes and text of a page, as a browser's parser sees them."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.text: list[str] = []
        self._in: str | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._in = tag
            (self.scripts if tag == "script" else self.styles).append("")

    def handle_endtag(self, tag):
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in == "script":
            self.scripts[-1] += data
        elif self._in == "style":
            self.styles[-1] += data
        else:
            self.text.append(data)

    def all(self, tag):
        return [a for t, a in self.tags if t == tag]


@pytest.fixture(scope="module")
def renderer():
    return FigureRenderer()


@pytest.fixture
def page_text(tmp_path, renderer):
    path = tmp_path / "r" / "report.html"
    write_html(path, sample_document(tmp_path, flake=flake_summary()), renderer=renderer)
    return path.read_text(encoding="utf-8")


def test_self_contained(page_text):
    page = Page(page_text)
    assert not page.all("link") and not page.all("iframe") and not page.all("object")
    for tag, attrs in page.tags:
        for name in ("src", "href"):
            value = attrs.get(name)
            if value is not None:
                assert value.startswith(("data:image/png;base64,", "#")), (tag, value)
    assert "http://" not in page_text.replace("http://x", "") and "https://" not in page_text
    assert "@import" not in page_text and "url(" not in page_text


def test_one_script_allowed_by_hash_only(page_text):
    page = Page(page_text)
    assert len(page.scripts) == 1 and len(page.styles) == 1
    (csp,) = [a["content"] for a in page.all("meta") if a.get("http-equiv") == "Content-Security-Policy"]
    digest = base64.b64encode(hashlib.sha256(page.scripts[0].encode()).digest()).decode()
    style = base64.b64encode(hashlib.sha256(page.styles[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp and f"style-src 'sha256-{style}'" in csp
    assert "default-src 'none'" in csp and "img-src data:" in csp and "unsafe-inline" not in csp


def test_user_text_is_text(page_text):
    page = Page(page_text)
    text = "".join(page.text)
    assert NASTY_ID in text                                   # shown, as text
    assert "<script>alert(2)</script>" in text                # the report, as text
    assert "</pre><script>alert('log')</script>" in text      # the log, as text
    assert "\x1b" not in page_text and "\x00" not in page_text
    assert "<b>bold</b>" not in page_text and "&lt;b&gt;bold&lt;/b&gt;" in page_text


def test_summary_provenance_tables_flake(page_text):
    text = " ".join(" ".join(Page(page_text).text).split())
    assert "17 results: 5 passed, 11 failed, 1 skipped." in text
    assert "Ascend910B3, torch 2.1.0, torch-npu 2.1.0.post3, CANN 8.0.RC1" in text
    assert "env PTO2_RING_HEAP 1073741824" in text
    assert "68889bc upstream head" in text
    assert "upstream 68889bc fix 65ae4d5" in text
    assert "0/5 PASS, 5/5 FAIL_507018 (ACL_ERROR_RT_AICPU_EXCEPTION) 5/5 PASS" in text
    assert "Flake statistics" in text and "15.0% (3/20)" in text and "NONDETERMINISTIC" in text
    assert "Failures (11)" in text


def test_filter_works_from_data_attributes(page_text):
    page = Page(page_text)
    (bar,) = [a for t, a in page.tags if a.get("id") == "filter"]
    assert "hidden" in bar                                    # shown by the script only
    boxes = {a["value"] for a in page.all("input") if a.get("type") == "checkbox"}
    assert {"PASS", "FAIL_507018", "MISMATCH", "HANG", "HARNESS_ERROR", "SKIPPED"} == boxes
    labelled = [a["data-labels"] for t, a in page.tags if "data-labels" in a]
    assert "FAIL_507018 PASS" in labelled
    assert all(set(v.split()) <= boxes for v in labelled)
    # one entry per case and label: the 5 device faults of one case are one entry, the 2 refs of paged-attn one
    assert sum(1 for t, a in page.tags if t == "article") == 6


def test_heatmaps_are_embedded_pngs(page_text):
    from PIL import Image
    page = Page(page_text)
    imgs = page.all("image")                   # the PNG inside each figure's inline SVG
    assert len(imgs) == 2                      # paged-attn (one entry for its two refs), the cache case
    for img, svg in zip(imgs, page.all("svg")):
        data = base64.b64decode(img["href"].split(",", 1)[1])
        assert data.startswith(PNG_MAGIC) and len(data) < 40_000
        im = Image.open(io.BytesIO(data))
        assert im.size == (int(img["width"]), int(img["height"]))   # shown at its own pixel size
        assert int(img["x"]) + im.size[0] <= int(svg["width"]) and int(img["y"]) + im.size[1] <= int(svg["height"])
        assert len(np.unique(np.asarray(im.convert("L")))) > 10
        assert svg["aria-label"].startswith("localisation of ")
    text = " ".join(page.text)
    assert "out: bad ratio per cell" in text and "bad ratio per page" in text and "share of cells" in text
    assert "per batch x head cell" in page_text and "per cache page" in page_text


def test_figure_text_is_svg_text_at_a_legible_size(renderer):
    from harness.reports.heatmap import HEIGHT, TEXT_PX, TITLE_PX, WIDTH, labels_for
    out_m, _ = mismatch_metrics()
    drawn = renderer.draw(panels_for("out", out_m))
    roles = {label.role for label in drawn.labels}
    assert roles == {"title", "axis", "tick"} and min(TEXT_PX, TITLE_PX) >= 11
    assert all(0 <= label.x <= WIDTH and 0 <= label.y <= HEIGHT for label in drawn.labels)
    assert {label.text for label in labels_for(panels_for("k", {"localisation": {"page": [0.0, 1.0]}}))} == {
        "bad ratio per page", "page", "0%", "50%", "100%"}
    css = re.search(r"<style>(.*?)</style>", render_html(build_document([], started=0.0, devices=[], command=[])),
                    re.S).group(1)
    assert f"svg.heatmap text{{" in css and f"font-size:{TEXT_PX}px" in css and f"font-size:{TITLE_PX}px" in css


def test_detail_is_capped(tmp_path, renderer):
    doc = sample_document(tmp_path)
    text = render_html(doc, max_detailed=2, renderer=renderer)
    assert "The first 2 entries have figures" in text and "the other 4 have their summary" in text
    assert text.count("<svg ") == 1           # the device faults (one entry) have no metrics, paged-attn has
    assert text.count("log (last 40 lines)") == 2


def test_log_excerpt_is_capped(tmp_path, renderer):
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i} {'x' * 200}\n" for i in range(3000)))
    doc = build_document([Result("m[a=1]", Outcome.CRASH, code="SIGSEGV", log=str(log), summary="died")],
                         started=0.0, devices=["cpu"], command=["h"])
    text = render_html(doc, renderer=renderer)
    pre = re.search(r"log \(last 40 lines\)</summary><pre>(.*?)</pre>", text, re.S).group(1)
    assert pre.splitlines()[-1].startswith("line 2999 ") and len(pre.splitlines()) <= 40


def test_no_failures_and_no_pyplot(tmp_path):
    had_pyplot = "matplotlib.pyplot" in sys.modules
    doc = build_document([Result("m[a=1]", Outcome.PASS, device="cpu")], started=0.0, devices=["cpu"],
                         command=["h"])
    text = render_html(doc)
    assert "No failures." in text and "<svg" not in text
    out_m, _ = mismatch_metrics()
    FigureRenderer().render(panels_for("out", out_m))
    assert had_pyplot or "matplotlib.pyplot" not in sys.modules


# -- figures ------------------------------------------------------------------------------

def test_panels_from_metrics():
    out_m, _ = mismatch_metrics(bad_head=5, batch=4, heads=8)
    p = panels_for("out", out_m)
    assert p.axes == ("batch", "head") and p.size == (4, 8) and p.pages is None
    assert p.ratio.shape == (4, 8) and (p.ratio[:, 5] == 1).all() and p.ratio.sum() == 4
    cache_m, _ = cache_metrics(bad_page=2)
    c = panels_for("k_cache", cache_m)
    assert list(c.pages) == [0.0, 0.0, 1.0, 0.0] and c.pages_per_bar == 1
    assert panels_for("x", {"skipped": "every row has slot < 0"}) is None


def test_many_pages_show_the_worst_of_each_run():
    ratios = [0.0] * 1000
    ratios[517] = 0.25
    ratios[3] = None                          # not compared (JSON null)
    p = panels_for("k_cache", {"localisation": {"page": ratios}})
    assert p.pages_per_bar == 4 and len(p.pages) == 250 <= MAX_PAGES
    assert p.pages[517 // 4] == 0.25 and p.pages[0] == 0.0 and p.ratio is None


def test_renderer_reuses_and_caches(renderer):
    a, _ = mismatch_metrics(bad_head=1)
    b, _ = mismatch_metrics(bad_head=None, bad_row=2)
    before = renderer.rendered
    png_a = renderer.render(panels_for("out", a))
    png_b = renderer.render(panels_for("out", b))
    assert renderer.render(panels_for("out", a)) == png_a
    assert renderer.rendered - before <= 2 and png_a != png_b
    assert png_a.startswith(PNG_MAGIC)
    only_pages = renderer.render(panels_for("v", {"localisation": {"page": [0.0, 1.0]}}))
    assert only_pages.startswith(PNG_MAGIC)
