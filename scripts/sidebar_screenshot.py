"""The sidebar at 1400x1000 in headless Chromium: python scripts/sidebar_screenshot.py [OUT.png].

Starts `python app.py`, saves the first screen (assets/screenshot-sidebar.png by default: the help texts folded,
one shown by hovering its (i)), and prints whether the controls fit one screen and how tall they are with every
help text unfolded (*Show the controls' help*). Needs Debian's chromium."""

import sys
import time
from pathlib import Path

from browser_app import app_page

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets" / "screenshot-sidebar.png"
BOTTOM = "() => document.querySelector('#controls').getBoundingClientRect().bottom"
with app_page("7917", width=1400, height=1000, timeout_ms=300_000) as page:
    page.wait_for_selector("#controls")
    time.sleep(3)
    folded = page.evaluate(BOTTOM)
    shown = page.locator("#controls .info-text").evaluate_all("els => els.filter(e => e.offsetParent).length")
    print(f"controls' bottom, help folded: {folded:.0f} px (screen 1000); help texts shown: {shown}")
    page.locator("#controls [data-testid='block-info']").nth(2).hover()
    time.sleep(0.5)
    page.screenshot(path=str(OUT))
    page.locator("#help-toggle input").check()
    time.sleep(0.5)
    shown = page.locator("#controls .info-text").evaluate_all("els => els.filter(e => e.offsetParent).length")
    print(f"controls' bottom, help unfolded: {page.evaluate(BOTTOM):.0f} px; help texts shown: {shown}")
