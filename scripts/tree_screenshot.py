"""A token-tree run on the default pair in headless Chromium: python scripts/tree_screenshot.py [OUT.png] [SHAPE].

Starts `python app.py` (default pair and precisions), sets the token tree (default 3-2-1-1), generates 48 tokens
of the example prompt with *Compare with target alone* ticked, prints the status and the summary, and saves a
screenshot of the Run tab's tree panel (the latest round) and the text. Needs the offline packs and chromium."""

import sys
from pathlib import Path

from browser_app import app_page, generate

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets" / "screenshot-tree.png"
SHAPE = sys.argv[2] if len(sys.argv) > 2 else "3-2-1-1"
PORT = "7915"
with app_page(PORT, height=1000, timeout_ms=900_000) as page:
    page.locator("#tree-shape textarea, #tree-shape input").first.fill(SHAPE)
    generate(page, 48)
    page.wait_for_function("() => /Done|rror/.test(document.querySelector('#status').innerText)")
    page.wait_for_timeout(1500)
    print(page.locator("#status").inner_text())
    print(page.locator("#summary").inner_text() if page.locator("#summary").count() else "")
    shot = page.locator("#tree")
    shot.scroll_into_view_if_needed()
    shot.screenshot(path=str(OUT))
