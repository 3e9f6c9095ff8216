"""One real race on the default pair in headless Chromium: python scripts/race_screenshot.py [OUT.png].

Starts `python app.py` (default pair, default precisions), ticks *Compare with target alone*, runs the
example prompt (64 tokens), replays the race at 4x, saves a screenshot of the comparison and prints both
lanes' measured figures. Needs Debian's chromium (scripts/install.sh --dev)."""
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets" / "screenshot-race.png"
PORT = "7912"
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
        page.locator("#compare-box input[type=checkbox]").check()
        box = page.locator("#max-new input[type=number]")
        box.fill("64")
        box.press("Enter")
        page.click("#generate")
        page.wait_for_selector("#compare .race .race-replay")
        page.locator("#compare .race-speed", has_text="4×").click()
        page.locator("#compare .race .race-replay").click()
        page.wait_for_timeout(2500)
        page.locator("#compare .race").screenshot(path=str(OUT))  # mid-race: the speculative side has finished
        page.wait_for_timeout(30_000)
        pass
        print(page.locator("#compare .race").inner_text())
        print(page.locator("#status").inner_text())
        browser.close()
finally:
    app.terminate()
