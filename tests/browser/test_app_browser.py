"""The real app in a real browser: python app.py on tiny random models, driven by Playwright.

Needs Debian's chromium (.ci/run installs it); without it the tests fail, unless
PLAYGROUND_SKIP_BROWSER=1 says to skip them.
The screenshot goes to $PLAYGROUND_SCREENSHOT (e.g. assets/screenshot.png), else to the test's tmp folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from playground import trace
from playground.ui import run_view

playwright = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BUSY = "#status .status-busy"
IDLE = "#status .status-ok, #status .status-info, #status .status-error"


@pytest.fixture(scope="module")
def app_url(app_server):
    return app_server


@pytest.fixture(scope="module")
def page(app_url):
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
        page.goto(app_url)
        page.wait_for_selector("#generate")
        yield page
        browser.close()


def set_number(page, elem_id: str, value: int) -> None:
    box = page.locator(f"#{elem_id} input[type=number]")
    box.fill(str(value))
    box.press("Enter")


def generate_and_wait(page, outcome: str = ".status-ok") -> None:
    """Press Generate and wait for this run's final status (only once it ran busy or its text changed, so a
    stale status from the last test cannot answer)."""
    page.evaluate("""() => { const box = document.querySelector('#status');
        window.oldStatus = (box.querySelector('.status') || {}).innerText; window.sawBusy = false;
        new MutationObserver(() => { if (box.querySelector('.status-busy')) window.sawBusy = true; })
            .observe(box, {subtree: true, childList: true, characterData: true}); }""")
    page.click("#generate")
    page.wait_for_function(f"""() => {{ const box = document.querySelector('#status');
        const now = box.querySelector('{outcome}');  // the status line itself, not Gradio's progress text
        return now !== null && (window.sawBusy || now.innerText !== window.oldStatus); }}""")


def status(page) -> str:
    return page.locator("#status .status").inner_text()


def test_first_generate_with_nothing_typed_produces_tokens(page):
    """A newcomer's first click: the prompt box holds an example, so Generate alone produces tokens, and the box
    *Compare with target alone* starts ticked, so the summary shows the measured speedup of this run (issue 37)."""
    assert page.locator("#prompt textarea").input_value().strip()
    assert page.locator("#compare-box input[type=checkbox]").is_checked()
    set_number(page, "max-new", 16)
    generate_and_wait(page)
    assert "Done: 16 tokens" in status(page)
    assert page.locator("#tokens .tok-accepted, #tokens .tok-correction, #tokens .tok-bonus").count() > 0
    page.wait_for_function("() => document.querySelector('#summary').innerText.includes('target alone:')")
    summary = page.locator("#summary").inner_text()
    assert "tick Compare" not in summary and re.search(r"tokens/s\s+[\d.]+ \(target alone: [\d.]+\)", summary)
    assert re.search(r"[\d.]+×\s+[\d.]+×\s+[\d.]+×", summary)  # the measured speedup beside the two predictions


def test_the_sidebar_fits_one_screen_with_its_help_folded(page):
    """At 1400x1000 the controls end within the first screen (issue 37): each help text is folded behind an (i)
    and shown while its control is hovered, *Show the controls' help* unfolds them all, and a control the chosen
    drafter does not use (the early-exit layer, the draft's precision) is hidden until a drafter uses it."""
    bottom = "() => document.querySelector('#controls').getBoundingClientRect().bottom + window.scrollY"
    infos = page.locator("#controls .info-text")
    # help texts shown, and help texts of shown controls that are not
    count = """els => [els.filter(e => e.offsetParent !== null).length,
                      els.filter(e => e.closest('.block').offsetParent !== null && e.offsetParent === null).length]"""
    assert page.evaluate(bottom) <= 1000
    assert infos.evaluate_all(count)[0] == 0 and not page.locator("#pair-info").is_visible()
    page.locator("#drafter [data-testid='block-info']").hover()
    assert page.locator("#drafter .info-text").is_visible()
    page.locator("#help-toggle input").check()
    try:
        assert infos.evaluate_all(count)[0] >= 5 and infos.evaluate_all(count)[1] == 0
        assert page.locator("#pair-info").is_visible()
    finally:
        page.locator("#help-toggle input").uncheck()
    assert not page.locator("#exit-layer").is_visible() and page.locator("#draft-precision").is_visible()
    assert page.locator("#draft-vocab").is_visible() and not page.locator("#max-ngram").is_visible()
    page.locator("#drafter label", has_text="early exit").click()
    try:
        page.wait_for_selector("#exit-layer", state="visible")
        assert not page.locator("#draft-precision").is_visible()
        # each drafter's own options show (every drafter of a CSS rule's, not only its first: issue 45)
        for drafter, shown in (("prompt lookup", "#max-ngram"), ("self int4", "#draftfree-options")):
            page.locator("#drafter label", has_text=drafter).first.click()
            page.wait_for_selector(shown, state="visible")
        page.locator("#drafter label", has_text="lookahead decoding").click()
        page.wait_for_selector("#draftfree-options", state="visible")
    finally:
        page.locator("#drafter label", has_text="draft model").first.click()
    page.wait_for_selector("#exit-layer", state="hidden")


def fixed_k(page) -> None:
    """The tiny test draft is as big as its target (c > 1): the default theory policy rightly stops drafting
    there. Tests about drafts pick fixed k."""
    page.locator("#adaptive label", has_text="fixed k").click()


def test_generate_shows_tokens_charts_and_summary(page):
    fixed_k(page)
    page.locator("#prompt textarea").fill("Once upon a time <b>there</b> was a fox")
    set_number(page, "max-new", 48)
    page.locator("#compare-box input[type=checkbox]").check()
    generate_and_wait(page)  # this run's own final status, not the last test's
    assert "Done" in status(page)
    page.wait_for_selector("#tokens .tok-accepted, #tokens .tok-correction")
    spans = page.locator("#tokens .tok")
    assert spans.count() > 10
    assert "q (target)" in (spans.first.get_attribute("title") or "")
    assert page.locator("#tokens b").count() == 0  # the prompt's markup is text, not HTML
    assert "<b>there</b>" in page.locator("#tokens .tok-prompt").inner_text()
    page.wait_for_function("document.querySelectorAll('#charts .js-plotly-plot').length >= 4")
    summary = page.locator("#summary").inner_text()
    assert re.search(r"tokens/s\s+[\d.]+", summary) and re.search(r"best k[^\n]*\s+\d+", summary)
    # compared, interleaved: c and v(k) are this run's own, and the labels say so; the measured column names the
    # quiet segments when other processes loaded part of the run (the browser's own drawing is one, on 2 cores)
    assert run_view.SPEEDUPS[0] in summary and run_view.SPEEDUPS[1] in summary
    assert run_view.SPEEDUPS[2] in summary or run_view.MEASURED_QUIET in summary
    assert run_view.CALIBRATED_BEFORE not in summary
    assert re.search(r"[\d.]+×\s+[\d.]+×\s+[\d.]+×", summary)  # the three speedups side by side
    assert "target fp32" in summary and trace.IN_RUN in summary  # the target step measured in this run
    assert "Identical outputs" in page.locator("#compare").inner_text()
    assert page.locator("#compare .tok-target").count() > 10
    assert page.locator("#download-csv").is_enabled()


def summary_figure(text: str, name: str) -> str:
    """The value of a row of the summary panel's table ("| name | **value** |" drawn as text)."""
    line = next(line for line in text.splitlines() if line.strip().startswith(name))
    return line.split("\t")[-1].strip()


def test_without_the_comparison_the_prediction_says_its_costs_are_the_start_ups(page):
    """Unticked, no target alone runs beside the speculative run: c and v(k) rest on the runner's calibration,
    and the panel says so instead of showing it as this run's (ticked: test_generate_shows_tokens_charts_and_summary
    sees the in-run labels)."""
    page.locator("#prompt textarea").fill("The quick brown fox jumps over the lazy dog")
    set_number(page, "max-new", 32)
    page.locator("#compare-box input[type=checkbox]").uncheck()
    generate_and_wait(page)
    summary = page.locator("#summary").inner_text()
    assert run_view.CALIBRATED_BEFORE in summary and run_view.SPEEDUPS[1] not in summary
    assert run_view.SOURCES[trace.CALIBRATION] in summary and trace.IN_RUN not in summary
    assert re.search(r"–\s*\(tick", summary)  # no measured speedup without the target alone


def test_stop_mid_run_then_run_again(page):
    # a prompt whose greedy continuation on the tiny pair runs all 400 tokens (others reach end of text first:
    # "def fib(n):" after 116, and once the run ended before the Stop reached it)
    page.locator("#prompt textarea").fill("Once upon a time")
    page.locator("#compare-box input[type=checkbox]").uncheck()
    set_number(page, "k", 1)
    set_number(page, "max-new", 400)
    page.click("#generate")
    page.wait_for_function(
        "() => /round ([3-9]|\\d\\d+),/.test(document.querySelector('#status').innerText)", timeout=60_000
    )
    page.click("#stop")
    page.wait_for_function("() => /Stopped|Done/.test(document.querySelector('#status').innerText)", timeout=20_000)
    assert "Stopped" in status(page), f"the run was not stopped: {status(page)!r}"
    time.sleep(1.0)  # nothing streams in after the stop
    assert "Stopped" in status(page)
    shown = page.locator("#tokens .tok").count()
    assert 0 < shown < 400
    # idle again: the next run works
    set_number(page, "max-new", 24)
    set_number(page, "k", 4)
    generate_and_wait(page)
    assert "Done: 24 tokens" in status(page)


def test_empty_prompt_shows_message(page):
    page.locator("#prompt textarea").fill("")
    generate_and_wait(page, ".status-error")
    assert "The prompt is empty" in status(page)
    assert page.locator("#tokens .tok").count() > 0  # the last output stays


def test_unloadable_model_id_shows_message_and_next_run_works(page):
    page.locator("#prompt textarea").fill("Once upon a time")
    page.get_by_text("Custom models (override the pair)").click()
    page.locator("#target-id textarea, #target-id input").first.fill("../../etc")
    generate_and_wait(page, ".status-error")
    assert "allowed model roots" in status(page)
    page.locator("#target-id textarea, #target-id input").first.fill("")
    set_number(page, "max-new", 12)
    generate_and_wait(page)
    assert "Done: 12 tokens" in status(page)


def test_screenshot(page, tmp_path):
    page.locator("#prompt textarea").fill("Once upon a time there was a little fox")
    set_number(page, "max-new", 64)
    page.locator("#compare-box input[type=checkbox]").check()
    generate_and_wait(page)
    page.wait_for_function("document.querySelectorAll('#charts .js-plotly-plot').length >= 4")
    time.sleep(0.5)
    out = Path(os.environ.get("PLAYGROUND_SCREENSHOT") or tmp_path / "screenshot.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out), full_page=True)
    assert out.stat().st_size > 10_000


def race_texts(page) -> list[str]:
    return page.evaluate("() => Array.from(document.querySelectorAll('#compare .race-text')).map(t => t.textContent)")


def test_replay_race_replays_both_measured_runs(page, tmp_path):
    """After a compared run: Replay at 1x grows both texts over time, each side's text is never complete before
    its measured finish, and they end as the two final texts with the clocks at the measured times (the JSON
    trace's engine seconds)."""
    fixed_k(page)
    page.locator("#prompt textarea").fill("Once upon a time there was a little fox")
    set_number(page, "k", 4)
    set_number(page, "max-new", 200)  # a replay long enough to sample mid-way on a fast machine
    page.locator("#compare-box input[type=checkbox]").check()
    generate_and_wait(page)
    page.wait_for_selector("#compare .race .race-replay")
    # the final texts as the comparison columns show them (the output tokens: not the rejected drafts)
    finals = page.evaluate("""() => Array.from(document.querySelectorAll('#compare .compare-col .tok-output')).map(
        box => Array.from(box.querySelectorAll('.tok:not(.tok-rejected):not(.tok-unevaluated)')).map(s => s.textContent.replace(/\u21b5/g, '')).join(''))""")
    assert len(finals) == 2 and all(finals)
    assert race_texts(page) == finals  # before any replay: the final state
    with page.expect_download() as download:
        page.click("#download-json")
    doc = json.loads(Path(download.value.path()).read_text(encoding="utf-8"))
    measured = [doc["summary"]["wall_s"], doc["baseline_summary"]["wall_s"]]

    page.locator("#compare .race-speed", has_text="1×").click()  # 1x: the tiny pair's runs last a fraction of a second
    page.evaluate("""() => {  // sample (ms since the click, both text lengths) until the replay is over
        const race = document.querySelector('#compare .race'), texts = race.querySelectorAll('.race-text');
        window.raceLog = []; window.raceDone = false;
        const start = performance.now();
        const id = setInterval(() => {
            window.raceLog.push([performance.now() - start, ...Array.from(texts).map(t => t.textContent.length)]);
            if (race.dataset.state === 'final' && window.raceLog.length > 1) { clearInterval(id); window.raceDone = true; }
        }, 4);
        race.querySelector('.race-replay').click(); }""")
    page.wait_for_function("window.raceDone === true", timeout=30_000)
    log = page.evaluate("window.raceLog")
    assert race_texts(page) == finals
    for side in (0, 1):
        lengths = [row[side + 1] for row in log]
        final = len(finals[side])
        assert lengths[-1] == final
        assert lengths == sorted(lengths), "a text only grows"
        assert any(0 < n < final for n in lengths), f"side {side} never showed part of its text"
        done_at = next(ms for ms, *ns in log if ns[side] == final) / 1000  # race seconds at 1x
        assert done_at >= measured[side] - 0.05, "a text complete before its measured finish"
    elapsed = log[-1][0] / 1000
    assert max(measured) - 0.05 <= elapsed <= max(measured) + 5  # played at 1x (the end within a slack)
    page.locator("#compare .race-speed", has_text="4×").click()  # 4x: the same replay in a quarter of the time
    elapsed = page.evaluate("""() => new Promise(done => {
        const race = document.querySelector('#compare .race'), start = performance.now();
        race.querySelector('.race-replay').click();
        const id = setInterval(() => { if (race.dataset.state === 'final') { clearInterval(id); done((performance.now() - start) / 1000); } }, 4);
    })""")
    assert max(measured) / 4 - 0.05 <= elapsed <= max(measured) / 4 + 5
    assert race_texts(page) == finals
    for lane, seconds in zip(page.locator("#compare .race-lane").all(), measured):
        clock = float(lane.locator(".race-time").inner_text().removesuffix(" s"))
        assert abs(clock - seconds) <= 0.011, (clock, seconds)
        done = lane.locator(".race-done")
        assert (
            done.is_visible()
            and abs(float(re.search(r"finished in ([\d.]+) s", done.inner_text())[1]) - seconds) <= 0.011
        )
    assert abs(float(page.locator("#compare .race-clock").inner_text().removesuffix(" s")) - max(measured)) <= 0.011

    page.locator("#compare .race-speed", has_text="1×").click()  # a screenshot mid-race at the measured speed
    page.locator("#compare .race-replay").click()
    page.wait_for_function("""() => { const t = document.querySelectorAll('#compare .race-text');
        return t[0].textContent.length + t[1].textContent.length > 20; }""")
    main = Path(os.environ.get("PLAYGROUND_SCREENSHOT") or tmp_path / "screenshot.png")
    out = main.with_name(f"{main.stem}-race.png")
    page.locator("#compare .race").screenshot(path=str(out))
    assert out.stat().st_size > 5_000
    page.wait_for_function("document.querySelector('#compare .race').dataset.state === 'final'", timeout=30_000)
    page.locator("#compare .race").screenshot(path=str(out.with_name(f"{main.stem}-race-final.png")))
    page.locator("#compare-box input[type=checkbox]").uncheck()


def shot(page, tmp_path, suffix: str) -> None:
    """A screenshot next to $PLAYGROUND_SCREENSHOT (name-SUFFIX.png), else in tmp_path."""
    main = Path(os.environ.get("PLAYGROUND_SCREENSHOT") or tmp_path / "screenshot.png")
    out = main.with_name(f"{main.stem}-{suffix}.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out), full_page=True)
    assert out.stat().st_size > 10_000


def test_step_through_rounds_one_at_a_time(page, tmp_path):
    fixed_k(page)
    page.locator("#prompt textarea").fill("Once upon a time")
    set_number(page, "k", 4)
    set_number(page, "temperature", 1)
    page.get_by_role("tab", name="Step through").click()
    page.click("#step-start")
    page.wait_for_function("() => document.querySelector('#step-status').innerText.includes('Next round')")
    for n in (1, 2, 3):
        page.click("#step-next")
        page.wait_for_function(f"() => document.querySelector('#step-status').innerText.includes('Round {n}:')")
    explain = page.locator("#step-round .explain")
    assert explain.count() == 1 and "Round 3" in explain.inner_text()
    assert page.locator("#step-round .pos").count() >= 1 and page.locator("#step-round .bar-q").count() >= 1
    assert "min(1, q/p)" in explain.inner_text()
    assert page.locator("#step-text .tok").count() >= 3
    shot(page, tmp_path, "step")
    set_number(page, "temperature", 0)


def test_one_sweep_draws_the_heatmaps(page, tmp_path):
    page.get_by_role("tab", name="Sweep").click()
    set_number(page, "max-new", 12)
    page.locator("#sweep-ks textarea, #sweep-ks input").first.fill("1 3")
    page.locator("#sweep-temps textarea, #sweep-temps input").first.fill("0 1")
    page.click("#sweep-run")
    page.wait_for_function(
        "() => document.querySelector('#sweep-status').innerText.includes('Sweep done')", timeout=120_000
    )
    assert "4 runs" in page.locator("#sweep-status").inner_text()
    page.wait_for_function(
        "document.querySelectorAll('#chart-sweep-speedup .heatmaplayer, #chart-sweep-speedup .hm').length"
        " + document.querySelectorAll('#chart-sweep-speedup image').length >= 1"
    )
    table = page.locator("#sweep-table").inner_text()
    assert table.count("target alone") == 2 and table.count("draft model") == 4  # 2 baselines, 2 k x 2 temperatures
    assert page.locator("#sweep-csv").is_enabled()
    shot(page, tmp_path, "sweep")


def test_theory_explorer_marks_the_best_k(page, tmp_path):
    page.get_by_role("tab", name="Theory").click()
    page.click("#theory-from-run")  # the last run (the sweep's settings ran no Run-tab run here: the screenshot's)
    page.wait_for_function("() => document.querySelector('#theory-line').innerText.includes('Best k')")
    line = page.locator("#theory-line").inner_text()
    assert re.search(r"Best k for α = [\d.]+, c = [\d.]+: \d+", line) and "last run" in line
    assert "Calibrated to this machine" in line
    assert page.locator("#chart-theory .js-plotly-plot").count() == 1
    assert page.locator("#chart-profile .js-plotly-plot").count() == 1
    shot(page, tmp_path, "theory")


def test_challenges_tab_runs_the_batch_challenge(page, tmp_path):
    """The Challenges tab on the tiny pair: the batch-size challenge with a progress bar, its curves beside the
    survey's figures, the table and the CSV; then another effect's explanation."""
    page.get_by_role("tab", name="Challenges").click()
    set_number(page, "max-new", 8)
    set_number(page, "k", 2)
    page.locator("#challenge-batch textarea, #challenge-batch input").first.fill("1 2")
    page.click("#challenge-run")
    page.wait_for_function(
        "() => document.querySelector('#challenge-status').innerText.includes('Done')", timeout=120_000
    )
    status = page.locator("#challenge-status").inner_text()
    assert "B=1:" in status and "B=2:" in status and "Every greedy output equals" in status
    page.wait_for_function("document.querySelectorAll('#chart-challenge .scatterlayer .trace').length >= 4")
    assert "2.5-2.85x" in page.locator("#challenge-explanation").inner_text()
    table = page.locator("#challenge-table").inner_text()
    assert table.count("speculative") == 2 and table.count("target alone") == 2
    assert page.locator("#challenge-csv").is_enabled()
    shot(page, tmp_path, "challenges")
    page.locator("#challenge-effect label", has_text="precision").click()
    page.wait_for_function("() => document.querySelector('#challenge-explanation').innerText.includes('llama.cpp')")
