"""The Step-through tab's callbacks on the tiny pairs: round by round, the same output as a full run."""

from __future__ import annotations

import pytest

from tests.helpers import run_all
from playground.run.runner import new_tokens
from playground.ui.common import read_spec
from playground.ui.state import SessionState
from playground.ui.step_tab import step_next, step_start
from playground.views.tokens import plain_text
from ui_support import PROMPT, controls

CODE = "for i in range(10):\n    print(i * i)"  # prompt lookup finds n-grams to copy here


@pytest.mark.parametrize(
    "temperature, drafter, prompt",
    [
        (0.0, "draft model", PROMPT),
        (1.0, "draft model", PROMPT),
        (1.0, "prompt lookup", CODE),
        (0.0, "early exit", PROMPT),
    ],
)
def test_step_through_adds_up_to_a_full_run(tiny_catalog, runner, temperature, drafter, prompt):
    state = SessionState()
    settings = controls(temperature=temperature, seed=5, drafter=drafter, prompt=prompt, k=3, max_new_tokens=24)
    status, _, _ = step_start(runner, state, settings)
    assert "Next round" in status
    explanations = []
    for _ in range(100):
        status, text, explanation = step_next(state)
        explanations.append(explanation)
        if "Finished" in status:
            break
    assert "Finished" in status and "tok-output" in text
    full = run_all(runner, read_spec(settings))  # the same settings, run to the end at once
    stepped = state.step.decoder.rounds
    assert new_tokens(stepped) == new_tokens(full)  # same seed, same rounds, same output
    assert plain_text(stepped, state.step.tokenizer) == plain_text(full, state.step.tokenizer)
    word = "argmax q" if temperature == 0 else "u = "
    drafted = [e for e, r in zip(explanations, full) if r.k > 0]
    assert drafted and all(word in e for e in drafted)
    assert all('class="explain"' in e for e in explanations)
    assert "finished" in step_next(state)[0]  # one more press: a message, nothing breaks


def test_step_through_needs_a_start_and_checks_the_settings(tiny_catalog, runner):
    state = SessionState()
    assert "Start step-through first" in step_next(state)[0]
    assert "k (draft length)" in step_start(runner, state, controls(k=0))[0]
    assert "prompt is empty" in step_start(runner, state, controls(prompt=" "))[0]
    assert "not valid text" in step_start(runner, state, controls(prompt="abc\ud800def"))[0]
    assert state.step is None


@pytest.mark.parametrize(
    "drafter, words", [("suffix decoding", "Suffix decoding"), ("lookahead decoding", "Jacobi window")]
)
def test_step_through_explains_a_draft_free_round(tiny_catalog, runner, drafter, words):
    state = SessionState()
    settings = controls(
        drafter=drafter, prompt=CODE + "\n" + CODE + "\n" + CODE, k=3, max_new_tokens=8, lookahead_prompt_pool=True
    )
    assert "Next round" in step_start(runner, state, settings)[0]
    explanations = [step_next(state)[2] for _ in range(3)]
    assert all('class="explain draftfree"' in e for e in explanations) and any(words in e for e in explanations)
