"""Issue 29, items 5 and 7: every odd input gets a message that says what to fix, in a line: a value of the wrong
type, a 1 MB value (never echoed back), non-numbers for the theory; no message shows a server path; Export never
loads a model (it runs outside the device queue)."""

from __future__ import annotations


import pytest

from playground import decoding, models
from playground.ui import challenges_tab, compare_tab, export_tab, run_tab, step_tab, sweep_tab, theory_tab
from playground.ui.common import NAMES, pair_info
from playground.ui.state import SessionState
from ui_support import PAIR, controls

BIG = "9" * 1_000_000  # 1 MB: digits, so that a number parser is tempted too
MOST = 2_000  # characters a refusal may take (a status line; the value itself quoted in a few dozen)


def status_of(tab: str, runner, **changes) -> str:
    """The status line a tab's callback answers the shared controls (with changes) with."""
    c = controls(**changes)
    if tab == "run":
        return list(run_tab.generate(runner, SessionState(), c, False))[-1].status
    if tab == "step":
        return step_tab.step_start(runner, SessionState(), c)[0]
    if tab == "sweep":
        return sweep_tab.run_sweep(runner, SessionState(), c, "2", "0", sweep_tab.THIS_PROMPT)[0]
    if tab == "compare":
        return compare_tab.run_compare(runner, SessionState(), [c.pair], [c.drafter], c)[0]
    if tab == "challenge":
        return challenges_tab.run_challenge(runner, SessionState(), c, "batch size", "1", "16", "fp32", "fp32")[0]
    return export_tab.show_export(runner, c)[0]


TABS = ("run", "step", "sweep", "compare", "challenge", "export")


@pytest.mark.parametrize("tab", TABS)
def test_a_pair_sent_as_a_list_is_answered_naming_the_pair(tiny_catalog, runner, tab):
    """Issue 29.5: a pair sent as a list gave "TypeError: unhashable type"."""
    status = status_of(tab, runner, pair=[PAIR, PAIR])
    words = "Pairs must be a list of names" if tab == "compare" else "The model pair must be one pair&#x27;s name"
    assert words in status and "Something went wrong" not in status


def test_a_value_of_the_wrong_type_names_its_field(tiny_catalog, runner):
    assert "The prompt must be text" in status_of("run", runner, prompt=["hi"])
    assert "The draft model id must be text" in status_of("run", runner, draft_id=["a"])
    assert (
        "Pairs must be a list of names"
        in compare_tab.run_compare(runner, SessionState(), [[PAIR]], ["draft model"], controls())[0]
    )
    assert (
        "Comparison done: 1 pair(s)"
        in compare_tab.run_compare(runner, SessionState(), PAIR, "prompt lookup", controls(max_new_tokens=4))[0]
    )  # one name: one pair


@pytest.mark.parametrize("field", NAMES)
def test_a_1mb_value_in_any_control_is_answered_in_a_line(tiny_catalog, runner, field):
    """Issue 29.7: a 1 MB input was echoed back in full (a 2 MB answer). A drafter's own options are read when
    that drafter runs: the run uses it."""
    drafter = next(
        (k.value for k in decoding.DRAFTERS if field in [w.name for w in decoding.strategy(k).widgets]), None
    )
    status = status_of("run", runner, **{field: BIG}, **({"drafter": drafter} if drafter else {}))
    assert "status-error" in status and len(status) < MOST, (field, len(status))


def test_a_1mb_value_in_a_tabs_own_box_is_answered_in_a_line(tiny_catalog, runner):
    answers = [
        sweep_tab.run_sweep(runner, SessionState(), controls(), BIG, "0", sweep_tab.THIS_PROMPT)[0],
        sweep_tab.run_sweep(runner, SessionState(), controls(), "2", "0", BIG)[0],
        challenges_tab.run_challenge(runner, SessionState(), controls(), BIG, "1", "16", "fp32", "fp32")[0],
        challenges_tab.run_challenge(runner, SessionState(), controls(), "batch size", BIG, "16", "fp32", "fp32")[0],
        challenges_tab.run_challenge(runner, SessionState(), controls(), "precision", "1", "16", BIG, "fp32")[0],
        compare_tab.run_compare(runner, SessionState(), [BIG], ["draft model"], controls())[0],
        compare_tab.run_compare(runner, SessionState(), [PAIR], [BIG], controls())[0],
        theory_tab.theory_view(BIG, 0.2, None)[1],
        theory_tab.theory_view(0.5, BIG, None)[1],
    ]
    assert [len(a) for a in answers if len(a) >= MOST or "status-error" not in a] == []


@pytest.mark.parametrize(
    "alpha, c, named",
    [
        ("abc", 0.2, "α (acceptance rate)"),
        (0.7, "x", "c (draft cost per token)"),
        (None, 0.2, "α"),
        (0.7, [1], "c (draft"),
        (float("nan"), 0.2, "α"),
        ("0.5", 0.2, "α (acceptance rate)"),  # issue 44: text was taken as a number here alone
        (0.7, "0.2", "c (draft cost per token)"),
    ],
)
def test_the_theory_with_non_numbers_names_alpha_or_c(alpha, c, named):
    """Issue 29.5: /theory with non-numbers answered {"error": null} (the page's own check), or "ValueError: could not
    convert string to float" (the callback)."""
    fig, line, profile = theory_tab.theory_view(alpha, c, SessionState())
    assert f"{named}" in line and "must be a number from 0 to" in line and "Something went wrong" not in line


def test_export_never_loads_a_model(tiny_catalog, runner, monkeypatch):
    """Issue 29.7: Export loaded the target (to count its layers for early exit) outside the device queue, while
    another user's run could be timed. Now the layer count comes from the target's config.json."""

    def no_load(*args, **kwargs):
        raise AssertionError("Export loaded a model")

    monkeypatch.setattr(runner, "_load", no_load)
    monkeypatch.setattr(models.MODELS, "get", no_load)
    status, hf = export_tab.show_export(runner, controls(drafter="early exit"))[:2]
    assert "status-ok" in status and "assistant_early_exit=1" in hf  # the tiny target: 2 layers, a quarter is 1


def test_no_message_shows_a_server_path(tiny_catalog, tiny_models, runner):
    """Issue 29.7: refusals named the server paths of the model roots (and the pair's folders showed in the page)."""
    root = str(tiny_models["target"].parent)
    shown = [
        status_of("run", runner, draft_id="/etc"),
        status_of("run", runner, target_id="../../etc"),
        status_of("run", runner, target_id=root + "/no-such-model"),
        pair_info(PAIR),
        status_of("export", runner, draft_id="/etc"),
    ]
    assert [s for s in shown if root in s or "/tmp" in s] == []
    assert "allowed model roots" in shown[0] and "local folder target" in shown[3]
