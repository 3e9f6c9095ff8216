"""Compare pairs on real offline pairs in headless Chromium: python scripts/compare_screenshot.py [OUT.png [CATEGORY...]].

Starts `python app.py` (default precisions), opens the Compare pairs tab, picks the three offline pairs of the
Qwen2.5-Coder 1.5B target and the drafters draft model, prompt lookup and early exit, runs a code prompt and a
prose prompt (48 tokens each, greedy, k = 4, the app's default k policy), saves a screenshot of the code run and
prints each run's table (from its CSV download). Needs the offline packs (scripts/install.sh --models) and Debian's chromium."""

import sys
import time
from pathlib import Path

import pandas as pd
from browser_app import app_page

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from playground import models  # noqa: E402
from playground.ui.common import load_examples  # noqa: E402

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets" / "screenshot-compare.png"
CATEGORIES = sys.argv[2:] or ["code", "story"]  # the screenshot shows the first
PORT = "7913"
PAIRS = [p.name for p in models.pairs().values() if p.target == "pack:qwen2.5-coder-1.5b-instruct"]
DRAFTERS = ["draft model", "prompt lookup", "early exit"]
PROMPTS = {e["category"]: e["prompt"] for e in reversed(load_examples())}  # the first example of each category
COLUMNS = ("pair", "method", "tokens_per_s", "speedup", "alpha", "mean_accepted", "c", "v", "greedy_equal", "near_tie")

with app_page(PORT, height=1300, timeout_ms=1_800_000) as page:
    url = page.url
    for i, category in enumerate(CATEGORIES):
        page.goto(url)  # a fresh page per prompt: the status of the last comparison does not linger
        page.get_by_role("tab", name="Compare pairs").click()
        for name in PAIRS:
            page.locator("#cmp-pairs label", has_text=name).locator("input").check()
        for name in DRAFTERS:
            page.locator("#cmp-drafters label", has_text=name).first.locator("input").check()
        box = page.locator("#max-new input[type=number]")
        box.fill("48")
        box.press("Enter")
        page.locator("#prompt textarea").fill(PROMPTS[category])
        started = time.time()
        page.click("#cmp-run")
        page.wait_for_timeout(3000)
        while "Comparison done" not in (status := page.locator("#cmp-status").inner_text()):
            if "rror" in status or "efused" in status:
                raise SystemExit(f"the comparison failed: {status}")
            print(f"  {time.time() - started:.0f} s: {status.strip()[:160]}", flush=True)
            page.wait_for_timeout(30_000)
        print(f"\n== {category} ({time.time() - started:.0f} s): {status}")
        with page.expect_download() as download:  # the table's numbers, from its CSV
            page.click("#cmp-csv")
        grid = pd.read_csv(download.value.path())
        grid = grid[grid["engine"] == "ours"]
        print(
            grid[[c for c in COLUMNS if c in grid]].to_string(index=False, float_format=lambda x: f"{x:.2f}"),
            flush=True,
        )
        if i == 0:
            page.wait_for_timeout(1500)
            page.locator("#chart-compare").scroll_into_view_if_needed()
            page.locator(".tabitem:visible").first.screenshot(path=str(OUT))
