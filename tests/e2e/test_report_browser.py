"""The HTML report in a real headless browser.

Opens the report from disk with Chromium / Chrome (``--headless --screenshot``
and ``--dump-dom``) or with Playwright driving Chromium (its own download, else
the system binary), and checks: the screenshot is a non-empty PNG, kept under
the test's tmp dir (its path is printed), the page's rendered text shows the
summary, the injected ``<script>alert(1)</script>`` case id is text and not an
element, no dialog opened, and the outcome filter was shown by the page's own
script (so the Content-Security-Policy let exactly that script run).  Through
Playwright it also measures the localisation figures as laid out: every title,
axis name and tick label of a heatmap is text whose rendered box is at least
``MIN_TEXT_PX`` high, and a screenshot of the first figure is kept under
``reports/test-artifacts/`` (its path is printed).  Skipped, with the reason,
where no browser is installed (CI installs Debian's chromium).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.reports.html import write_html
from report_samples import NASTY_ID, flake_summary, sample_document

pytestmark = pytest.mark.slow

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MIN_TEXT_PX = 11              # legible at 100% zoom
ARTIFACTS = Path(__file__).resolve().parents[2] / "reports" / "test-artifacts"


def _binary() -> str | None:
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def _playwright_chromium():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    try:
        manager = sync_playwright().start()
    except Exception:
        return None
    # Playwright's own Chromium download, else the system binary (CI installs Debian's).
    binary = _binary()
    for options in [{}] + ([{"executable_path": binary}] if binary else []):
        try:
            return manager, manager.chromium.launch(**options)
        except Exception:  # that browser is not there
            continue
    manager.stop()
    return None


class _Text(HTMLParser):
    """The text a reader sees: character data outside <script> and <style>."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag, attrs):
        self._skipping += tag in ("script", "style")

    def handle_endtag(self, tag):
        self._skipping -= tag in ("script", "style")

    def handle_data(self, data):
        if not self._skipping:
            self.parts.append(data)


def _text(dom: str) -> str:
    parser = _Text()
    parser.feed(dom)
    return re.sub(r"\s+", " ", "".join(parser.parts))


def _keep(shot: Path, min_bytes: int = 10_000) -> None:
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > min_bytes
    print(f"report screenshot: {shot}")


@pytest.fixture
def report(tmp_path):
    path = tmp_path / "report.html"
    write_html(path, sample_document(tmp_path, flake=flake_summary()))
    return path


def _check_dom(dom: str) -> None:
    text = _text(dom)
    assert "Summary" in text and "17 results" in text, text[:2000]
    assert NASTY_ID in text                                    # the case id, as text
    assert dom.lower().count("<script") == 1                   # ours only
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom     # the case id, escaped
    assert 'id="filter" hidden' not in dom                     # the page's script ran


def _check_figures(page) -> None:
    """The heatmaps' texts as laid out at 100% zoom: present, each box >= MIN_TEXT_PX high."""
    figures = page.locator("svg.heatmap")
    assert figures.count() == 2
    first = figures.first.bounding_box()
    assert first["width"] >= 700 and first["height"] >= 200        # shown at its own pixel size, not shrunk
    texts = page.locator("svg.heatmap text")
    boxes = []
    for i in range(texts.count()):
        text = texts.nth(i)
        box = text.bounding_box()
        boxes.append((text.get_attribute("class"), text.text_content(), min(box["width"], box["height"])))
    roles = {role for role, _, _ in boxes}
    assert {"title", "axis", "tick"} <= roles
    assert "out: bad ratio per cell" in {t for _, t, _ in boxes} and "bad ratio per page" in {t for _, t, _ in boxes}
    small = [(t, round(h, 1)) for _, t, h in boxes if h < MIN_TEXT_PX]
    assert not small, small
    print("heatmap text heights (px):", sorted({round(h, 1) for _, _, h in boxes}))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-heatmap.png"
    figures.first.locator("xpath=..").screenshot(path=str(shot))
    _keep(shot, min_bytes=5_000)


def test_report_in_chromium_cli(report, tmp_path):
    binary = _binary()
    if binary is None:
        pytest.skip(f"no Chromium/Chrome binary on PATH (looked for {', '.join(BROWSERS)})")
    url = report.as_uri()
    flags = [binary, "--headless=new", "--disable-gpu", "--no-sandbox", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / "screenshots" / "report-chromium-cli.png"
    shot.parent.mkdir()
    subprocess.run(flags + [f"--screenshot={shot}", "--window-size=1280,2000", url],
                   check=True, capture_output=True, timeout=120)
    _keep(shot)
    dom = subprocess.run(flags + ["--dump-dom", url], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    _check_dom(dom)


def test_report_in_playwright(report, tmp_path):
    started = _playwright_chromium()
    if started is None:
        pytest.skip("playwright is not installed, or it finds no Chromium (playwright install chromium, "
                    f"or one of {', '.join(BROWSERS)} on PATH)")
    manager, browser = started
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 2000})
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(report.as_uri())
        shot = tmp_path / "screenshots" / "report-playwright.png"
        page.screenshot(path=str(shot), full_page=False)
        _keep(shot)
        _check_dom(page.content())
        assert page.locator("script").count() == 1 and not dialogs
        assert NASTY_ID in page.inner_text("body")
        _check_figures(page)
        # The filter hides what is unchecked.
        page.uncheck("#filter input[value=FAIL_507018]")
        assert page.locator("article[data-labels=FAIL_507018]").first.is_hidden()
    finally:
        browser.close()
        manager.stop()
