"""Links, projector mode and the start-up line in a real browser: a link with settings reproduces them (and the Export
tab's link does too); bad values in a link are left out with a note, never an error page; the projector toggle makes
the tokens, the summary and the chart labels large; the start-up line says when the default pair is ready.

Screenshots go to $PLAYGROUND_SCREENSHOTS (a folder) when set, else to the test's tmp folder."""

from __future__ import annotations

import json

from playground.core.config import DecodeConfig

from test_recorded_browser import ROOT, browser, shots, status, wait_status  # noqa: F401  (browser: a fixture)

SETTINGS = (
    "?drafter=early+exit&exit_layer=1&target_precision=fp32&invariant=0&k=7&policy=heuristic&tree=2-2&temperature=0.7"
    "&top_p=0.9&seed=42&max_new_tokens=33&example=3&compare=1"
)


def open_page(browser, url: str):  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(url)
    page.wait_for_selector("#generate")
    return page


def number(page, elem_id: str) -> str:
    return page.locator(f"#{elem_id} input[type=number]").input_value()


def checked(page, elem_id: str) -> str:
    return page.locator(f"#{elem_id} input:checked").first.get_attribute("value") or ""


def settle(page) -> None:
    """The page's load event has set the controls (the example prompt is the last to arrive)."""
    example = json.loads((ROOT / "assets" / "prompts.json").read_text())[2]["prompt"]
    page.wait_for_function("t => document.querySelector('#prompt textarea').value === t", arg=example)


def assert_settings(page) -> None:
    assert number(page, "k") == "7" and number(page, "seed") == "42" and number(page, "max-new") == "33"
    assert number(page, "temperature") == "0.7" and number(page, "top-p") == "0.9" and number(page, "exit-layer") == "1"
    assert checked(page, "drafter") == "early exit" and checked(page, "adaptive") == "adaptive (heuristic)"
    assert page.locator("#tree-shape input, #tree-shape textarea").first.input_value() == "2-2"
    assert page.locator("#compare-box input[type=checkbox]").is_checked()
    assert not page.locator("#invariant input[type=checkbox]").is_checked()


def test_a_link_with_settings_reproduces_them_and_export_gives_it(browser, app_server):  # noqa: F811
    page = open_page(browser, app_server + SETTINGS)
    settle(page)
    assert_settings(page)
    page.get_by_role("tab", name="Export").click()
    page.click("#export-link-run")
    page.wait_for_function(
        "() => document.querySelector('#export-link textarea, #export-link input').value.startsWith('http')"
    )
    link = page.locator("#export-link textarea, #export-link input").first.input_value()
    assert link.startswith(app_server) and "k=7" in link and "example=3" in link
    page.close()
    again = open_page(browser, link)  # the Export tab's own link gives the same page
    settle(again)
    assert_settings(again)
    again.close()


def test_bad_values_in_a_link_are_left_out_with_a_note(browser, app_server):  # noqa: F811
    page = open_page(browser, app_server + "?k=99&pair=%3Cb%3Enope%3C/b%3E&temperature=hot&colour=red&seed=5")
    wait_status(page, "except")
    note = status(page)
    assert "k='99'" in note and "temperature='hot'" in note and "'colour' is not a setting" in note
    assert "<b>nope</b>" in note and page.locator("#status b").count() == 0  # shown as text
    page.wait_for_function("() => document.querySelector('#seed input[type=number]').value === '5'")
    assert number(page, "k") == str(DecodeConfig().k)  # the page's own value
    page.close()


def test_projector_mode_makes_the_text_large(browser, app_server, tmp_path):  # noqa: F811
    page = open_page(browser, app_server + "?run=code")
    wait_status(page, "Recorded run")
    size = "s => parseFloat(getComputedStyle(document.querySelector(s)).fontSize)"
    small = page.evaluate(size, "#tokens .tok-output")
    page.locator("#projector input[type=checkbox]").check()
    page.wait_for_function("document.documentElement.classList.contains('projector')")
    assert page.evaluate(size, "#tokens .tok-output") >= 24 > small
    assert page.evaluate(size, "#summary td") >= 20
    assert page.evaluate(size, "#chart-acceptance .main-svg .xtick text") >= 16
    page.locator("#status").scroll_into_view_if_needed()
    page.evaluate("() => window.scrollBy(0, document.querySelector('#status').getBoundingClientRect().top - 20)")
    page.wait_for_timeout(500)
    page.screenshot(path=str((shots() or tmp_path) / "screenshot-projector.png"))
    page.locator("#projector input[type=checkbox]").uncheck()
    page.wait_for_function("!document.documentElement.classList.contains('projector')")
    page.close()
    linked = open_page(browser, app_server + "?projector=1")
    linked.wait_for_function("document.documentElement.classList.contains('projector')")
    linked.close()


def test_the_start_up_line_says_when_the_default_pair_is_ready(browser, app_server):  # noqa: F811
    page = open_page(browser, app_server)
    page.wait_for_function(
        "() => (document.querySelector('#startup') || {}).innerText?.includes('Ready')", timeout=300_000
    )
    assert "after start-up" in page.locator("#startup").inner_text()
    page.close()
