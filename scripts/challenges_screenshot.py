"""The Challenges tab on the default pair in headless Chromium: python scripts/challenges_screenshot.py [OUT.png].

Starts `python app.py` (default pair and precisions), opens the Challenges tab, runs the batch-size challenge
(batch sizes 1 2 4 8, k = 4, 32 new tokens, greedy), saves a screenshot of the tab and prints the status line.
Needs the offline packs and Debian's chromium (scripts/install.sh --dev)."""
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets" / "screenshot-challenges.png"
SIZES = sys.argv[2] if len(sys.argv) > 2 else "1 2 4 8"
PORT = "7914"
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
        page = browser.new_page(viewport={"width": 1400, "height": 1200})
        page.set_default_timeout(1_800_000)
        page.goto(url)
        box = page.locator("#max-new input[type=number]")
        box.fill("32")
        box.press("Enter")
        page.get_by_role("tab", name="Challenges").click()
        page.locator("#challenge-batch textarea, #challenge-batch input").first.fill(SIZES)
        started = time.time()
        page.click("#challenge-run")
        page.wait_for_function("() => /Done|rror|Refused|refused/.test(document.querySelector('#challenge-status').innerText)")
        print(f"{time.time() - started:.0f} s: {page.locator('#challenge-status').inner_text()}")
        page.wait_for_timeout(1500)
        page.locator(".tabitem:visible").first.screenshot(path=str(OUT))
        browser.close()
finally:
    app.terminate()
