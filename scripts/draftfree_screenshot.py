"""A suffix-decoding or lookahead-decoding run in headless Chromium:
python scripts/draftfree_screenshot.py suffix|lookahead [OUT.png] [PAIR].

Starts `python app.py` with PAIR as the default pair (default: the fast offline pair, whose Qwen2.5-Coder 0.5B
target is the only model these drafters load), picks the drafter, puts the benchmark's repetitive 'code edits'
prompt (suffix) or the example code prompt (lookahead) in the box, generates 64 tokens with *Compare with target
alone* ticked, prints the status and the summary, and saves a screenshot of the text (kept drafts underlined by
source) and the round panel (assets/screenshot-suffix.png or assets/screenshot-lookahead.png)."""

import json
import os
import sys
from pathlib import Path

from browser_app import app_page, generate

ROOT = Path(__file__).resolve().parent.parent
METHOD = sys.argv[1] if len(sys.argv) > 1 else "suffix"
OUT = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "assets" / f"screenshot-{METHOD}.png"
os.environ["PLAYGROUND_DEFAULT_PAIR"] = (
    sys.argv[3] if len(sys.argv) > 3 else "SmolLM2 135M -> Qwen2.5-Coder 0.5B (offline, cross-tokenizer, fast)"
)
DRAFTER = {"suffix": "suffix decoding", "lookahead": "lookahead decoding"}[METHOD]
PORT = "7917" if METHOD == "suffix" else "7918"

with app_page(PORT, height=1400, timeout_ms=900_000) as page:
    page.locator("#drafter label", has_text=DRAFTER).click()
    if METHOD == "suffix":
        repetitive = json.loads((ROOT / "playground" / "bench" / "repetitive.json").read_text())
        page.locator("#prompt textarea").fill(next(p["prompt"] for p in repetitive if p["category"] == "code edits"))
    generate(page, 64)
    page.wait_for_function("() => /Done|rror/.test(document.querySelector('#status').innerText)")
    page.wait_for_timeout(2000)
    print(page.locator("#status").inner_text())
    print(page.locator("#summary").inner_text())
    page.locator("#tokens .tok-output").evaluate("e => { e.scrollTop = e.scrollHeight; }")
    top = page.locator("#status").bounding_box()
    bottom = page.locator("#tree").bounding_box()  # the round panel, under the text
    page.screenshot(
        path=str(OUT),
        full_page=True,
        clip={
            "x": top["x"] - 8,
            "y": top["y"] - 8,
            "width": top["width"] + 16,
            "height": bottom["y"] + bottom["height"] - top["y"] + 16,
        },
    )
