"""Measure the first minutes in headless Debian chromium: command 1 (bash scripts/launch.sh) until the page answers,
the start-up line until it says ready, then the first Generate until the first token; plus a gallery run's click until
it is fully shown, with the app's RSS. Screenshots into a folder.

    python scripts/first_minutes.py [--cache DIR] [--port 7871] [--shots assets] [--skip-generate] [--no-wait-ready]

--cache: the model cache to start with (an empty folder: a fresh machine's; default: the usual one, prepared)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent


def rss_mb(pid: int) -> float:
    """The RSS of the app: the python process under launch.sh (exec keeps the pid)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=None)
    parser.add_argument("--port", default="7871")
    parser.add_argument("--shots", default=None)
    parser.add_argument("--skip-generate", action="store_true")
    parser.add_argument(
        "--no-wait-ready", action="store_true", help="stop after the gallery click (implies --skip-generate)"
    )
    args = parser.parse_args()
    env = dict(os.environ, GRADIO_SERVER_PORT=args.port, GRADIO_ANALYTICS_ENABLED="False")
    env.pop("PLAYGROUND_DTYPE", None)
    if args.cache:
        env["PLAYGROUND_CACHE"] = args.cache
    url = f"http://127.0.0.1:{args.port}/"
    began = time.monotonic()
    app = subprocess.Popen(
        ["bash", "scripts/launch.sh"],
        cwd=ROOT,
        env=env,
        stdout=open("/tmp/first-minutes.log", "w"),
        stderr=subprocess.STDOUT,
    )
    shots = Path(args.shots) if args.shots else None
    try:
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                if app.poll() is not None:
                    raise SystemExit(f"launch.sh exited with {app.returncode}")
                time.sleep(0.2)
        page_s = time.monotonic() - began
        print(f"page answers {page_s:.1f} s after 'bash scripts/launch.sh'", flush=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=shutil.which("chromium") or "/usr/bin/chromium",
                headless=True,
                args=["--no-sandbox", "--disable-gpu"],
            )
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(1_800_000)
            page.goto(url)
            page.wait_for_selector("#generate")
            shown_s = time.monotonic() - began
            line = page.locator("#startup").inner_text()
            print(f"page shown in chromium {shown_s:.1f} s; start-up line: {line!r}", flush=True)
            if shots:
                page.wait_for_timeout(1500)
                page.screenshot(path=str(shots / "screenshot-startup.png"))
                print(f"start-up line at the screenshot: {page.locator('#startup').inner_text()!r}", flush=True)
            before = rss_mb(app.pid)
            click = time.monotonic()
            page.click("#gallery-story")
            page.wait_for_function(
                "document.querySelectorAll('#charts .js-plotly-plot').length >= 4 && "
                "document.querySelector('#compare .race') !== null && "
                "document.querySelector('#status').innerText.includes('Recorded run')"
            )
            print(
                f"gallery run fully shown {time.monotonic() - click:.2f} s after its click; app RSS "
                f"{before:.0f} -> {rss_mb(app.pid):.0f} MB",
                flush=True,
            )
            if (
                shots
            ):  # the Run tab from the recorded-runs row down: the buttons, the status, the tokens, the comparison
                page.evaluate(
                    "() => window.scrollBy(0, document.querySelector('#recorded-runs')"
                    ".getBoundingClientRect().top - 60)"
                )
                page.wait_for_timeout(500)
                page.screenshot(path=str(shots / "screenshot-recorded.png"))
            if args.no_wait_ready:
                browser.close()
                return
            page.wait_for_function("() => document.querySelector('#startup').innerText.match(/Ready|could not/)")
            ready_s = time.monotonic() - began
            print(
                f"start-up line ready {ready_s:.1f} s after launch: {page.locator('#startup').inner_text()!r}; "
                f"app RSS {rss_mb(app.pid):.0f} MB",
                flush=True,
            )
            if not args.skip_generate:  # a fresh page, as a newcomer opens it (its token box holds no token yet)
                page.goto(url)
                page.wait_for_selector("#generate")
                click = time.monotonic()
                page.click("#generate")
                page.wait_for_selector("#tokens .tok", timeout=600_000)
                first = time.monotonic() - click
                print(
                    f"first token {first:.1f} s after the first click on Generate (ready before the click); "
                    f"status then: {page.locator('#status').inner_text()!r}",
                    flush=True,
                )
            browser.close()
    finally:
        app.terminate()
        app.wait(30)


if __name__ == "__main__":
    main()
