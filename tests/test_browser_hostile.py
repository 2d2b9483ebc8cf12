"""A run full of Markdown, HTML and Streamlit directives, shown in a real headless Chromium
(issue 9): the page loads nothing from outside, links nothing, and shows the text as written.
Outside CI a missing chromium or playwright skips with the reason; with CI=true it fails."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from test_dashboard_hostile import HOSTILE, IMAGE, LINK, PLOTLY_LINK, _markdown_run

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
# Streamlit's own Markdown: bodies, captions, alerts, headings, labels.
MARKDOWN = ('[data-testid="stMarkdownContainer"], [data-testid="stCaptionContainer"], '
            '[data-testid="stAlert"], [data-testid="stHeading"]')


@pytest.fixture(scope="module")
def browser_page(tmp_path_factory):
    if not CHROMIUM.exists() or not _has_playwright():
        if os.environ.get("CI") == "true":
            pytest.fail("chromium and playwright are needed in CI (.ci/run installs them)")
        pytest.skip("needs /usr/bin/chromium and playwright (pip install playwright)")
    from playwright.sync_api import sync_playwright

    folder = tmp_path_factory.mktemp("browser-hostile")
    _markdown_run(folder)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, PROFILER_RUNS_DIR=str(folder / "runs"), PROFILER_RUNS_ROOT=str(folder))
    log = open(folder / "server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "dashboard/app.py",
                               "--server.port", str(port)], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health",
                                            timeout=2) as answer:
                    if answer.read() == b"ok":
                        break
            except OSError:
                pass
            assert server.poll() is None and time.time() < deadline, "the server did not start"
            time.sleep(0.2)
        with sync_playwright() as api:
            browser = api.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                          args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1700})
            page.set_default_timeout(45_000)
            requests: list[str] = []
            page.on("request", lambda request: requests.append(request.url))
            page.goto(f"http://127.0.0.1:{port}")
            page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(
                has_text="Showing").click()
            page.get_by_role("option").filter(has_text="run [x]").first.click()
            page.get_by_text("Notes from the run").first.click()
            yield page, requests
            browser.close()
    finally:
        server.terminate()
        server.wait(10)
        log.close()


def _has_playwright() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


def _shown_text(page) -> str:
    texts = page.locator(MARKDOWN).all_inner_texts()
    return "\n".join(texts).replace("\u2060", "")


@pytest.mark.parametrize("view, title", [("Overview", "Overview"),
                                         ("Counters", "Counters: the article's lessons"),
                                         ("Launch split", "Launch split: CPU launch vs GPU work")])
def test_a_runs_markdown_shows_as_text_and_loads_nothing(browser_page, view, title):
    page, requests = browser_page
    page.locator('[data-testid="stSidebarNav"]').get_by_text(view, exact=True).click()
    page.get_by_role("heading", name=title).wait_for()
    page.get_by_text("Incomplete run:").first.wait_for()
    markdown = page.locator(MARKDOWN)
    assert markdown.locator("img").count() == 0
    assert markdown.locator("a[href*='attacker']").count() == 0
    assert markdown.locator('[data-testid="stIconMaterial"]').count() == 0
    body = page.locator('[data-testid="stMarkdownContainer"], [data-testid="stAlert"]')
    assert body.locator(".katex, table, code").count() == 0  # no math, table or code
    assert body.locator("h1").all_inner_texts() == [title]  # the view's own title, no other
    assert body.locator("strong", has_text=re.compile(r"^bold$")).count() == 0
    shown = _shown_text(page)
    assert f"Incomplete run: it stopped during {IMAGE} {LINK}" in shown
    if view == "Overview":  # the GPU name in the header and the note, exactly as written
        assert shown.count(HOSTILE.replace("\n", " ").replace("\r", " ")) >= 2
    assert not [url for url in requests if "attacker" in url]


@pytest.mark.parametrize("view, title, shows", [
    ("Counters", "Counters: the article's lessons", "![x](http://attacker.invalid/p.png)"),
    ("Kernels", "Kernels", PLOTLY_LINK),  # a name no other kernel shares: shown as written
    ("GPU", "GPU telemetry (NVML)", PLOTLY_LINK)])
def test_chart_labels_from_a_run_show_as_written_and_link_nothing(browser_page, view, title, shows):
    """Plotly renders <a href>, <b> and entities in category labels, legend entries and hover
    text: labels from a run (counter phases, kernel names, phase names) are escaped, so the
    chart shows them as written, with no link."""
    page, requests = browser_page
    page.locator('[data-testid="stSidebarNav"]').get_by_text(view, exact=True).click()
    page.get_by_role("heading", name=title, exact=True).wait_for()
    charts = page.locator('[data-testid="stPlotlyChart"]')
    charts.first.locator(".main-svg").first.wait_for()
    page.wait_for_function(
        "s => [...document.querySelectorAll('[data-testid=stPlotlyChart] text')]"
        ".some(t => t.textContent.includes(s))", arg=shows[:20])
    assert charts.locator("a").count() == 0  # Plotly turned no label into a link
    assert charts.locator("text b").count() == 0
    labels = "\n".join(charts.locator("text").all_text_contents())
    assert shows[:40] in labels, labels[:2000]  # the label as written, markup and all
    assert not [url for url in requests if "attacker" in url]
