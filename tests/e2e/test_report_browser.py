"""The HTML report in a real headless browser, where one is installed.

Opens the report from disk with Chromium / Chrome (``--headless --screenshot``
and ``--dump-dom``) or with Playwright's Chromium, and checks: the screenshot
is a non-empty PNG, the DOM (after the page's script ran) shows the summary,
the injected ``<script>alert(1)</script>`` case id is text and not an element,
no dialog opened, and the outcome filter was shown by the page's own script
(so the Content-Security-Policy let exactly that script run).  Skipped, with
the reason, where no browser is installed.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest

from harness.reports.html import write_html
from report_samples import NASTY_ID, flake_summary, sample_document

pytestmark = pytest.mark.slow

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


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
    try:
        browser = manager.chromium.launch()
    except Exception:                          # the package without its browser download
        manager.stop()
        return None
    return manager, browser


@pytest.fixture
def report(tmp_path):
    path = tmp_path / "report.html"
    write_html(path, sample_document(tmp_path, flake=flake_summary()))
    return path


def _check_dom(dom: str) -> None:
    assert "Summary" in dom and "17 results" in dom
    assert dom.lower().count("<script") == 1                   # ours only
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom     # the case id, as text
    assert 'id="filter" hidden' not in dom                     # the page's script ran


def test_report_in_chromium_cli(report, tmp_path):
    binary = _binary()
    if binary is None:
        pytest.skip(f"no Chromium/Chrome binary on PATH (looked for {', '.join(BROWSERS)})")
    url = report.as_uri()
    flags = [binary, "--headless=new", "--disable-gpu", "--no-sandbox", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / "shot.png"
    subprocess.run(flags + [f"--screenshot={shot}", "--window-size=1280,2000", url],
                   check=True, capture_output=True, timeout=120)
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    dom = subprocess.run(flags + ["--dump-dom", url], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    _check_dom(dom)


def test_report_in_playwright(report, tmp_path):
    started = _playwright_chromium()
    if started is None:
        pytest.skip("playwright is not installed or has no Chromium (playwright install chromium)")
    manager, browser = started
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 2000})
        dialogs = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(report.as_uri())
        shot = page.screenshot(full_page=False)
        assert shot.startswith(PNG_MAGIC) and len(shot) > 10_000
        _check_dom(page.content())
        assert page.locator("script").count() == 1 and not dialogs
        assert NASTY_ID in page.inner_text("body")
        # The filter hides what is unchecked.
        page.uncheck("#filter input[value=FAIL_507018]")
        assert page.locator("article[data-labels=FAIL_507018]").first.is_hidden()
    finally:
        browser.close()
        manager.stop()
