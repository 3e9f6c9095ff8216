"""A token-tree run on the default pair in headless Chromium: python scripts/tree_screenshot.py [OUT.png] [SHAPE].

Starts `python app.py` (default pair and precisions), sets the token tree (default 3-2-1-1), generates 48 tokens
of the example prompt with *Compare with target alone* ticked, prints the status and the summary, and saves a
screenshot of the Run tab's tree panel (the latest round) and the text. Needs the offline packs and chromium."""
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets" / "screenshot-tree.png"
SHAPE = sys.argv[2] if len(sys.argv) > 2 else "3-2-1-1"
PORT = "7915"
env = dict(os.environ, GRADIO_SERVER_PORT=PORT)
env.pop("PLAYGROUND_DTYPE", None)
app = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
url = f"http://127.0.0.1:{PORT}/"
try:
    for _ in range(240):
        try:
            urllib.request.urlopen(url, timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium", headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(900_000)
        page.goto(url)
        page.locator("#tree-shape textarea, #tree-shape input").first.fill(SHAPE)
        page.locator("#compare-box input[type=checkbox]").check()
        box = page.locator("#max-new input[type=number]")
        box.fill("48")
        box.press("Enter")
        page.click("#generate")
        page.wait_for_function("() => /Done|rror/.test(document.querySelector('#status').innerText)")
        page.wait_for_timeout(1500)
        print(page.locator("#status").inner_text())
        print(page.locator("#summary").inner_text() if page.locator("#summary").count() else "")
        shot = page.locator("#tree")
        shot.scroll_into_view_if_needed()
        shot.screenshot(path=str(OUT))
        browser.close()
finally:
    app.terminate()
