"""One source for every default (issue 45): DecodeConfig() gives the documented defaults, and the page's controls, built
by build_demo, start at DecodeConfig's and at each strategy's Options' defaults (read from the built layout)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import gradio as gr

from playground import decoding
from playground.core.config import DecodeConfig, KPolicy
from playground.run.spec import parse_policy
from playground.ui import build_demo

DOCS = Path(__file__).resolve().parents[2] / "docs"
README = DOCS.parent / "README.md"
# What docs/tabs-and-controls.md ("The defaults") and the README say the defaults are
DOCUMENTED = dict(
    k=8, policy=KPolicy.CONFIDENCE, confidence=0.4, tree=None, temperature=0.0, top_p=1.0, seed=0, max_new_tokens=128
)


def blocks_by_id(demo: gr.Blocks) -> dict:
    return {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}


def test_decode_config_gives_the_documented_defaults():
    d = DecodeConfig()
    assert {name: getattr(d, name) for name in DOCUMENTED} == DOCUMENTED
    text = " ".join((DOCS / "tabs-and-controls.md").read_text(encoding="utf-8").split())
    said = text[text.index("**The defaults**") :][:600]
    for phrase in ("k = 8", "the draft confidence policy (threshold 0.4)", "no token tree", "temperature 0"):
        assert phrase in said, phrase
    for phrase in ("top-p 1", "seed 0", "128 new tokens", "`config.DecodeConfig`"):
        assert phrase in said, phrase
    assert "the page's default is 128" in " ".join(README.read_text(encoding="utf-8").split())


def test_a_default_is_read_without_building_a_config(monkeypatch):
    d = DecodeConfig()
    assert all(DecodeConfig.default(f.name) == getattr(d, f.name) for f in fields(DecodeConfig))
    assert DecodeConfig.within_limit(1024) == d
    assert DecodeConfig.within_limit(100) == DecodeConfig(max_new_tokens=100)  # a server whose limit is under it


def test_the_pages_controls_start_at_the_defaults(tiny_catalog, runner):
    blocks = blocks_by_id(build_demo(runner))
    page = DecodeConfig(
        k=blocks["k"].value,
        policy=parse_policy(blocks["adaptive"].value),
        confidence=blocks["confidence"].value,
        tree=blocks["tree-shape"].value,
        temperature=blocks["temperature"].value,
        top_p=blocks["top-p"].value,
        seed=blocks["seed"].value,
        max_new_tokens=blocks["max-new"].value,
    )
    assert page == DecodeConfig()
    for kind in decoding.DRAFTERS:  # each strategy's widgets start at its Options' defaults
        s = decoding.strategy(kind)
        shown = {w.name: w.read(blocks[w.name.replace("_", "-")].value) for w in s.widgets}
        assert s.options(**shown) == s.options(), kind


def test_the_page_starts_within_the_servers_limit(tiny_catalog, runner, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MAX_NEW_TOKENS", "100")
    slider = blocks_by_id(build_demo(runner))["max-new"]
    assert slider.value == 100 == slider.maximum
