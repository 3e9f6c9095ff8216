"""Helpers of the UI tests: the shared controls' values on the tiny pair (tests/conftest.py's tiny_catalog)."""

from __future__ import annotations

import gradio as gr

from playground.core.config import DEFAULT_CONFIDENCE, KPolicy
from playground.ui.common import Controls

PAIR, TWIN = "tiny (test)", "tiny twin (test)"
PROMPT = "Once upon a time"
SKIP = gr.skip()


def controls(**changes) -> Controls:
    """The shared controls as the page starts them, on the tiny pair, with changes."""
    values = dict(
        pair=PAIR,
        draft_id="",
        target_id="",
        target_precision="default",
        invariant=True,
        drafter="draft model",
        draft_precision="default",
        exit_layer=0,
        k=4,
        tree="",
        policy=KPolicy.FIXED.label,
        confidence=DEFAULT_CONFIDENCE,
        temperature=0.0,
        top_p=1.0,
        max_new_tokens=12,
        seed=0,
        prompt=PROMPT,
    )
    values.update(changes)
    return Controls.named(**values)  # the strategies' options: their defaults unless changed
