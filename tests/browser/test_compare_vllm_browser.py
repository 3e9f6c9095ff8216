"""The Compare pairs tab with a vLLM engine row, in a real browser: python app.py on the tiny pairs, and the
session's OpenAI-compatible vLLM server (tests/conftest.py: vllm_server, draft-model speculation at k = 3) on
the tiny vLLM pair, started on localhost. The tab is pointed at the server by URL, as a user who outgrew the
CPU points it at a multi-GPU deployment: vLLM's row stands beside ours in the same bars, its acceptance by
position beside ours, its greedy output equal to ours (fp32 on both sides), and a bad URL is named. The app's
allow-list (PLAYGROUND_VLLM_URLS) names that server; any other URL is refused.

Needs Debian's chromium (skip with PLAYGROUND_SKIP_BROWSER=1) and vLLM's environment (skip without it, or fail
under PLAYGROUND_REQUIRE_VLLM=1). The screenshot goes next to $PLAYGROUND_SCREENSHOT (name-compare-vllm.png),
else to the test's tmp folder.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from playground.vllm import peer as vllm_peer
from tests.vllm_support import K, require_vllm

playwright = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
VLLM_PAIR = "tiny vllm (test)"  # tests/conftest.py: app_process adds it to the app's catalog
pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page(app_server):
    if not Path(CHROMIUM).exists():
        if os.environ.get("PLAYGROUND_SKIP_BROWSER") == "1":
            pytest.skip("PLAYGROUND_SKIP_BROWSER=1 and no chromium")
        pytest.fail("no chromium: apt-get install -y chromium (or set PLAYGROUND_SKIP_BROWSER=1)")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(60_000)
        page.goto(app_server)
        page.wait_for_selector("#generate")
        page.locator("#adaptive label", has_text="fixed k").click()  # the server drafts k = 3: ours too
        for elem_id, value in (("k", K), ("max-new", 24)):
            box = page.locator(f"#{elem_id} input[type=number]")
            box.fill(str(value))
            box.press("Enter")
        page.get_by_role("tab", name="Compare pairs").click()
        yield page
        browser.close()


def choose(page, group: str, names: set[str]) -> None:
    """Tick exactly `names` in a checkbox group."""
    labels = page.locator(f"#{group} label")
    for i in range(labels.count()):
        label = labels.nth(i)
        label.locator("input").set_checked(label.inner_text().strip() in names)


def point_at_server(page, url: str, model: str = "tiny") -> None:
    if not page.locator("#cmp-vllm-url").is_visible():
        page.locator("#cmp-vllm-box").get_by_text("vLLM engine row").first.click()  # open the accordion
    page.locator("#cmp-vllm label", has_text=vllm_peer.VLLM_URL).click()
    page.locator("#cmp-vllm-url textarea, #cmp-vllm-url input").first.fill(url)
    page.locator("#cmp-vllm-model textarea, #cmp-vllm-model input").first.fill(model)


REFUSED = "#cmp-vllm-url div.validation-error"  # a vLLM check's refusal: under the URL, before the job is queued


def said(page) -> str:
    """The status line, and a refusal of the vLLM check under the URL field (ui/vllm_checks.py) if there is one."""
    refusal = page.locator(REFUSED)
    return page.locator("#cmp-status").inner_text() + ("\n" + refusal.inner_text() if refusal.count() else "")


def compare_and_wait(page, *endings: str, any_error: bool = False) -> str:
    """Press Compare; what the tab says (said()) once it shows one of `endings` (none of which it showed before),
    or with any_error, any error (when it showed none)."""
    page.click("#cmp-run")
    page.wait_for_function(
        "([endings, anyError, refused]) => { const box = document.querySelector('#cmp-status');"
        " const refusal = document.querySelector(refused);"
        " const text = box.innerText + (refusal ? refusal.innerText : '');"
        " return endings.some(e => text.includes(e))"
        " || (anyError && (box.querySelector('.status-error') !== null || refusal !== null)); }",
        arg=[list(endings), any_error, REFUSED],
        timeout=300_000,
    )
    return said(page)


def table_rows(page, elem_id: str) -> list[dict[str, str]]:
    """A gr.Dataframe's rows as {column: cell text}: the headers' titles, the grid's cells by data-row and
    data-col (Gradio draws the rows as a grid of cells, its <table> holds one row to measure)."""
    head = page.eval_on_selector_all(f"#{elem_id} thead th", "ths => ths.map(th => th.title)")
    cells = page.eval_on_selector_all(
        f"#{elem_id} [data-row][data-col]",
        """cells => cells.map(cell =>
        [Number(cell.dataset.row), Number(cell.dataset.col), cell.innerText.trim()])""",
    )
    rows: dict[int, dict[str, str]] = {}
    for row, col, text in cells:
        rows.setdefault(row, {})[head[col]] = text
    return [rows[i] for i in sorted(rows)]


def test_a_vllm_server_row_stands_beside_ours(page, vllm_server, tmp_path):
    require_vllm()
    choose(page, "cmp-pairs", {VLLM_PAIR})
    choose(page, "cmp-drafters", {"draft model", "prompt lookup"})
    point_at_server(page, vllm_server.base)
    assert "per-token colours (Run tab) are ours alone" in page.locator("#cmp-vllm-note").inner_text()
    status = compare_and_wait(page, "Comparison done", any_error=True)
    assert f"1 vLLM engine row(s) from the vLLM server at {vllm_server.base}" in status, status
    rows = table_rows(page, "cmp-table")
    assert [r["engine"] for r in rows] == ["ours"] * 3 + ["vllm"], rows  # ours: the baseline and 2 drafters
    vllm = rows[-1]
    assert vllm["method"] == "vLLM server" and vllm["k"] == str(K)
    assert vllm["greedy_equal"].lower() == "true", vllm  # fp32 on both sides: vLLM's output is our target alone's
    assert 0 <= float(vllm["alpha"]) <= 1 and float(vllm["tokens_per_s"]) > 0
    page.wait_for_function("document.querySelectorAll('#chart-compare .js-plotly-plot').length == 1")
    bars = page.locator("#chart-compare").inner_text()
    assert "vLLM server" in bars and "draft model" in bars  # vLLM's bars in the same chart as ours
    positions = page.locator("#chart-compare-positions").inner_text()
    assert "vLLM server" in positions and re.search(r"draft model.* k=3", positions)
    main = Path(os.environ.get("PLAYGROUND_SCREENSHOT") or tmp_path / "screenshot.png")
    out = main.with_name(f"{main.stem}-compare-vllm.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out), full_page=True)
    assert out.stat().st_size > 10_000


def test_a_url_where_nothing_listens_is_named_in_the_tab(page):
    point_at_server(page, "http://127.0.0.1:9")  # allowed (tests/conftest.py: vllm_urls), nobody there
    status = compare_and_wait(page, "Cannot reach a vLLM server")
    assert "http://127.0.0.1:9" in status and "Is it running?" in status


def test_a_url_the_operator_did_not_allow_is_refused_in_the_tab(page):
    """Issue 35.2: the cloud's metadata address (or any internal one) was fetched; the allow-list names the servers."""
    point_at_server(page, "http://169.254.169.254")
    status = compare_and_wait(page, "is not one of the vLLM servers this app may reach")
    assert "PLAYGROUND_VLLM_URLS" in status and "is not one of" in page.locator(REFUSED).inner_text()
