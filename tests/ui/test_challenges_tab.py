"""The Challenges tab's callback on the tiny pair: each effect's chart, table and CSV; bad requests refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from playground.ui.challenges_tab import explanation, on_effect, run_challenge
from playground.ui.state import SessionState
from playground.views import challenges as views
from ui_support import controls


def challenge(runner, effect, batch="1 2", context="16 32", targets="fp32", drafts="fp32 int8", **changes):
    changes.setdefault("max_new_tokens", 6)
    return run_challenge(runner, SessionState(), controls(**changes), effect, batch, context, targets, drafts)


def test_batch_challenge_draws_the_curves_and_offers_the_csv(tiny_catalog, runner):
    status, fig, text, table, csv = challenge(runner, views.BATCH, batch="2, 1")
    assert "Done: Speedup over the batched target alone: B=1:" in status and "Every greedy output equals" in status
    assert list(table["batch_size"]) == [1, 1, 2, 2] and table["greedy_equal"].all()
    assert {t.name for t in fig.data} >= {views.BASELINE, views.SPECULATIVE, "speedup (this machine)"}
    assert text.startswith("**This run:** Speedup") and "2.5-2.85x" in text
    path = Path(csv["value"])
    assert path.name == "challenge-batch.csv" and path.read_text().splitlines()[0].startswith("batch_size,method")


def test_context_and_precision_challenges(tiny_catalog, runner):
    status, fig, text, table, csv = challenge(runner, views.CONTEXT, context="32 16")
    assert "Speedup by context length (tokens): 16:" in status and list(table["context"]) == [16, 32]
    assert "KV target" in {t.name for t in fig.data}
    status, fig, text, table, csv = challenge(runner, views.PRECISION)
    assert "Speedup by target/draft precision: fp32/fp32:" in status and "fp32/int8" in status
    assert len(table) == 3 and Path(csv["value"]).name == "challenge-precision.csv"
    assert "llama.cpp" in text


@pytest.mark.parametrize(
    "effect, changes, message",
    [
        (views.BATCH, dict(batch="0 2"), "batch sizes: &#x27;0&#x27; is out of range"),
        (views.BATCH, dict(batch="1 32"), "whole numbers 1..16"),
        (views.CONTEXT, dict(context="16 600"), "context window is 512 tokens"),
        (views.PRECISION, dict(targets="fp64"), "target precisions: &#x27;fp64&#x27; is not one of fp32, bf16, fp16"),
        (views.PRECISION, dict(drafts=""), "draft precisions: give at least one"),
        (views.BATCH, dict(drafter="prompt lookup"), "runs the pair&#x27;s draft model"),
        ("everything", {}, "Unknown challenge"),
        # the fields the chosen challenge does not use are checked too (issue 55: these ran unchecked)
        (views.PRECISION, dict(batch="-5 99999999"), "batch sizes: &#x27;-5&#x27; is out of range"),
        (views.BATCH, dict(drafts="fp8"), "draft precisions: &#x27;fp8&#x27; is not one of"),
        (views.BATCH, dict(context="16 ٣٢"), "context lengths: &#x27;٣٢&#x27; is not a number"),  # Arabic-Indic 32
        (views.CONTEXT, dict(targets=["fp32"]), "target precisions"),
    ],
)
def test_bad_requests_are_refused_with_a_message_naming_the_field(tiny_catalog, runner, effect, changes, message):
    fields = {k: changes.pop(k) for k in ("batch", "context", "targets", "drafts") if k in changes}
    status = challenge(runner, effect, **fields, **changes)[0]
    assert "status-error" in status and message in status


def test_picking_an_effect_shows_its_empty_chart_and_its_explanation():
    fig, text = on_effect(views.PRECISION)
    assert "Run the precision challenge" in fig.layout.annotations[0].text
    assert text == explanation(views.PRECISION) and "llama.cpp" in text and "**This run:**" not in text
