"""The Challenges tab on the default pair in headless Chromium: python scripts/challenges_screenshot.py [OUT.png].

Starts `python app.py` (default pair and precisions), opens the Challenges tab, runs the batch-size challenge
(batch sizes 1 2 4 8, k = 4, 32 new tokens, greedy), saves a screenshot of the tab and prints the status line.
Needs the offline packs and Debian's chromium (scripts/install.sh --dev)."""

import sys
import time
from pathlib import Path

from browser_app import app_page

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets" / "screenshot-challenges.png"
SIZES = sys.argv[2] if len(sys.argv) > 2 else "1 2 4 8"
PORT = "7914"
with app_page(PORT, height=1200, timeout_ms=1_800_000) as page:
    box = page.locator("#max-new input[type=number]")
    box.fill("32")
    box.press("Enter")
    page.get_by_role("tab", name="Challenges").click()
    page.locator("#challenge-batch textarea, #challenge-batch input").first.fill(SIZES)
    started = time.time()
    page.click("#challenge-run")
    page.wait_for_function(
        "() => /Done|rror|Refused|refused/.test(document.querySelector('#challenge-status').innerText)"
    )
    print(f"{time.time() - started:.0f} s: {page.locator('#challenge-status').inner_text()}")
    page.wait_for_timeout(1500)
    page.locator(".tabitem:visible").first.screenshot(path=str(OUT))
