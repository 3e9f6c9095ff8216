"""The Compare pairs tab with a vLLM engine row on the default pair, in headless Chromium:
python scripts/compare_vllm_screenshot.py [OUT.png] [--category code] [--max-new-tokens 48].

Starts `python app.py` (default precisions), opens the Compare pairs tab, picks the default pair and the draft model
at fixed k = 4 (vLLM drafts a fixed k), chooses *vLLM started here (same pair)*, runs one prompt and saves a
screenshot of the tab (default assets/screenshot-compare-vllm.png), then prints the table (from its CSV download).
vLLM starts two engines (its target alone, its draft model): minutes each on a 2-core CPU. Needs the offline packs,
vLLM's environment (scripts/install.sh --vllm) and Debian's chromium."""

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
from browser_app import app_page

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from playground import models  # noqa: E402
from playground.vllm import peer as vllm_peer  # noqa: E402
from playground.ui.common import load_examples  # noqa: E402

COLUMNS = ("engine", "method", "k", "tokens_per_s", "speedup", "alpha", "mean_accepted", "greedy_equal", "near_tie")
PROMPTS = {e["category"]: e["prompt"] for e in reversed(load_examples())}  # the first example of each category

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("out", nargs="?", default=str(ROOT / "assets" / "screenshot-compare-vllm.png"))
parser.add_argument("--category", default="code", choices=sorted(PROMPTS))
parser.add_argument("--max-new-tokens", type=int, default=48)
args = parser.parse_args()

with app_page("7917", height=1300, timeout_ms=3_600_000) as page:
    page.wait_for_selector("#generate")
    page.locator("#adaptive label", has_text="fixed k").click()
    for elem_id, value in (("k", 4), ("max-new", args.max_new_tokens)):
        box = page.locator(f"#{elem_id} input[type=number]")
        box.fill(str(value))
        box.press("Enter")
    page.locator("#prompt textarea").fill(PROMPTS[args.category])
    page.get_by_role("tab", name="Compare pairs").click()
    labels = page.locator("#cmp-pairs label")
    for i in range(labels.count()):
        labels.nth(i).locator("input").set_checked(labels.nth(i).inner_text().strip() == models.default_pair())
    labels = page.locator("#cmp-drafters label")
    for i in range(labels.count()):
        labels.nth(i).locator("input").set_checked(labels.nth(i).inner_text().strip() == "draft model")
    page.locator("#cmp-vllm-box").get_by_text("vLLM engine row").first.click()  # open the accordion
    page.locator("#cmp-vllm label", has_text=vllm_peer.VLLM_HERE).click()
    started = time.time()
    page.click("#cmp-run")
    page.wait_for_timeout(3000)
    while "Comparison done" not in (status := page.locator("#cmp-status").inner_text()):
        if "rror" in status or "efused" in status or "no vLLM row" in status:
            raise SystemExit(f"the comparison failed: {status}")
        print(f"  {time.time() - started:.0f} s: {status.strip()[:160]}", flush=True)
        page.wait_for_timeout(20_000)
    print(f"\n== {args.category} ({time.time() - started:.0f} s): {status}")
    page.wait_for_timeout(1500)
    page.locator("#cmp-vllm-box").scroll_into_view_if_needed()
    page.locator(".tabitem:visible").first.screenshot(path=args.out)
    with page.expect_download() as download:  # the table's numbers, from its CSV
        page.click("#cmp-csv")
    grid = pd.read_csv(download.value.path())
    print(grid[[c for c in COLUMNS if c in grid]].to_string(index=False, float_format=lambda x: f"{x:.2f}"), flush=True)
    print(f"screenshot: {args.out}")
