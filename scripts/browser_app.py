"""What the screenshot scripts share: `python app.py` on a port, and a headless Debian chromium page on it.

with app_page(PORT) as page:   # the app at its defaults (PLAYGROUND_DTYPE ignored), the page opened
    generate(page, 64)         # the example prompt, n tokens, *Compare with target alone* ticked
"""

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def app_page(port: str, width: int = 1400, height: int = 1000, timeout_ms: int = 1_800_000):
    env = dict(os.environ, GRADIO_SERVER_PORT=port)
    env.pop("PLAYGROUND_DTYPE", None)
    app = subprocess.Popen(
        [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=shutil.which("chromium") or "/usr/bin/chromium",
                headless=True,
                args=["--no-sandbox", "--disable-gpu"],
            )
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(timeout_ms)
            page.goto(url)
            yield page
            browser.close()
    finally:
        app.terminate()


def generate(page, max_new_tokens: int) -> None:
    """Tick *Compare with target alone*, set the token limit and press Generate (returns at once)."""
    page.locator("#compare-box input[type=checkbox]").check()
    box = page.locator("#max-new input[type=number]")
    box.fill(str(max_new_tokens))
    box.press("Enter")
    page.click("#generate")
