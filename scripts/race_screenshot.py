"""One real race on the default pair in headless Chromium: python scripts/race_screenshot.py [OUT.png].

Starts `python app.py` (default pair, default precisions), ticks *Compare with target alone*, runs the
example prompt (64 tokens), replays the race at 4x, saves a screenshot of the comparison and prints both
lanes' measured figures. Needs Debian's chromium (scripts/install.sh --dev)."""

import sys
from pathlib import Path

from browser_app import app_page, generate

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets" / "screenshot-race.png"
PORT = "7912"
with app_page(PORT, height=1000, timeout_ms=900_000) as page:
    generate(page, 64)
    page.wait_for_selector("#compare .race .race-replay")
    page.locator("#compare .race-speed", has_text="4×").click()
    page.locator("#compare .race .race-replay").click()
    page.wait_for_timeout(2500)
    page.locator("#compare .race").screenshot(path=str(OUT))  # mid-race: the speculative side has finished
    page.wait_for_timeout(30_000)
    pass
    print(page.locator("#compare .race").inner_text())
    print(page.locator("#status").inner_text())
