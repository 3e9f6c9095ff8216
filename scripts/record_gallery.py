"""Record the gallery of assets/runs/: real runs of the offline pairs through the Run tab's own generate, saved as
its 'Trace as JSON' download. python scripts/record_gallery.py [NAME ...] [--max-new-tokens N]

The runs take a few minutes on a 2-core CPU (the pairs load, warm up and profile once)."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from playground.models.catalog import DEFAULT_PAIR  # noqa: E402
from playground.run.runner import Runner  # noqa: E402
from playground.core.config import DecodeConfig  # noqa: E402
from playground.decoding.strategies import lookahead, suffix  # noqa: E402
from playground.ui import run_tab  # noqa: E402
from playground.ui.common import Controls, load_examples  # noqa: E402
from playground.ui.recorded_runs import RUNS  # noqa: E402
from playground.ui.state import SessionState  # noqa: E402

CROSS = "SmolLM2 135M -> Qwen2.5-Coder 0.5B (offline, cross-tokenizer, fast)"
EXAMPLES = {e["title"]: e["prompt"] for e in load_examples()}
# name -> (changes to the page's defaults, compare with the target alone)
RUNS_TO_RECORD = {
    "code": (dict(prompt=EXAMPLES["Fibonacci with memoisation"]), True),
    "story": (dict(prompt=EXAMPLES["The fox and the river"]), True),
    "cross": (dict(pair=CROSS, drafter="cross-tokenizer draft model", prompt=EXAMPLES["Refactor a loop"]), True),
    "tree": (dict(tree="3-2-1-1", prompt=EXAMPLES["Fibonacci with memoisation"]), False),
}


def page_defaults(max_new_tokens: int) -> dict:
    default = DecodeConfig.default  # the page's controls start at DecodeConfig's defaults
    return dict(
        pair=DEFAULT_PAIR,
        draft_id="",
        target_id="",
        target_precision="default",
        invariant=True,
        drafter="draft model",
        draft_precision="default",
        exit_layer=0,
        **asdict(suffix.Options()),
        **asdict(lookahead.Options()),
        k=default("k"),
        tree="",
        policy=default("policy").label,
        confidence=default("confidence"),
        temperature=default("temperature"),
        top_p=default("top_p"),
        max_new_tokens=max_new_tokens,
        seed=default("seed"),
        prompt="",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(RUNS_TO_RECORD))
    parser.add_argument("--max-new-tokens", type=int, default=96)
    args = parser.parse_args()
    runner = Runner()
    RUNS.mkdir(parents=True, exist_ok=True)
    for name in args.names:
        changes, compare = RUNS_TO_RECORD[name]
        began = time.monotonic()
        views = list(
            run_tab.generate(
                runner, SessionState(), Controls.named(**(page_defaults(args.max_new_tokens) | changes)), compare
            )
        )
        final = views[-1]
        if "status-ok" not in final.status:
            raise SystemExit(f"{name}: {final.status}")
        shutil.copyfile(final.json["value"], RUNS / f"{name}.json")
        size = (RUNS / f"{name}.json").stat().st_size
        print(f"{name}: {size:,} bytes in {time.monotonic() - began:.0f} s: {final.status}", flush=True)


if __name__ == "__main__":
    main()
