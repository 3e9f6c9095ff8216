"""The Run tab on the default pair in headless Chromium: python scripts/run_screenshot.py [OUT.png].

Starts `python app.py` (default pair and precisions), generates 64 tokens of the example prompt (code) with
*Compare with target alone* ticked, prints the status, the summary and the comparison, and saves a full-page
screenshot (assets/screenshot.png by default). Needs the offline packs and Debian's chromium."""

import sys
import time
from pathlib import Path

from browser_app import app_page, generate

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets" / "screenshot.png"
PORT = "7916"
with app_page(PORT, height=1800, timeout_ms=900_000) as page:
    generate(page, 64)
    page.wait_for_selector("#status .status-ok", timeout=900_000)
    page.wait_for_function("document.querySelectorAll('#charts .js-plotly-plot').length >= 4")
    time.sleep(2)
    print("status:", page.locator("#status").inner_text())
    print("summary:", page.locator("#summary").inner_text())
    print("compare:", page.locator("#compare .status").inner_text())
    page.screenshot(path=str(OUT), full_page=True)
