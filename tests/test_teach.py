"""The teaching and comparison tools on the tiny pairs: step-through, theory explorer, sweep,
pair comparison, export, the early-exit drafter through the UI."""
from __future__ import annotations

import ast
import math

import pytest

from conftest import TINY_PAIR, TWIN_PAIR
from playground import render, session, teach, theory, ui
from playground.engine import DecodeConfig

PROMPT = "Once upon a time"


def settings(**changes):
    """The shared controls in read_settings' order, with changes."""
    values = dict(pair=TINY_PAIR, draft_id="", target_id="", drafter=session.DRAFT_MODEL, k=3, adaptive=ui.FIXED_K,
                  temperature=0.0, top_p=1.0, max_new=24, seed=0, prompt=PROMPT, exit_layer=0)
    values.update(changes)
    return list(values.values())


CODE = "for i in range(10):\n    print(i * i)"  # prompt lookup finds n-grams to copy here


@pytest.mark.parametrize("temperature, drafter, prompt", [
    (0.0, session.DRAFT_MODEL, PROMPT), (1.0, session.DRAFT_MODEL, PROMPT), (1.0, session.PROMPT_LOOKUP, CODE),
    (0.0, session.EARLY_EXIT, PROMPT)])
def test_step_through_adds_up_to_a_full_run(tiny_catalog, tiny_pair, temperature, drafter, prompt):
    state = ui.Session()
    status, _, _ = ui.step_start(*settings(temperature=temperature, seed=5, drafter=drafter, prompt=prompt), state)
    assert "Next round" in status
    explanations = []
    for _ in range(100):
        status, text, explanation = ui.step_next(state)
        explanations.append(explanation)
        if "Finished" in status:
            break
    assert "Finished" in status
    full = session.decoder(tiny_pair, drafter, prompt, DecodeConfig(max_new_tokens=24, k=3, temperature=temperature, seed=5))
    list(full)
    assert state.stepper.decoder.new_tokens == full.new_tokens  # same seed, same rounds, same output
    assert render.plain_text(state.stepper.decoder.rounds, tiny_pair.tokenizer) == render.plain_text(full.rounds, tiny_pair.tokenizer)
    word = "argmax q" if temperature == 0 else "u = "
    drafted = [e for e, r in zip(explanations, full.rounds) if r.k > 0]
    assert drafted and all(word in e for e in drafted)
    assert "finished" in ui.step_next(state)[0]  # one more press: a message, nothing breaks


def test_step_through_needs_a_start_and_checks_the_settings(tiny_catalog):
    state = ui.Session()
    assert "Start step-through first" in ui.step_next(state)[0]
    assert "k (draft length)" in ui.step_start(*settings(k=0), state)[0]
    assert "prompt is empty" in ui.step_start(*settings(prompt=" "), state)[0]
    assert state.stepper is None


def test_explain_records_the_numbers_the_view_shows(tiny_pair):
    rejected = 0
    for seed in range(6):
        dec = session.decoder(tiny_pair, session.DRAFT_MODEL, PROMPT,
                              DecodeConfig(max_new_tokens=20, k=4, temperature=1.0, seed=seed, explain=3))
        for r in dec:
            assert len(r.alternatives) == r.accepted + 1  # the evaluated positions
            for i in range(min(r.k, r.accepted + 1)):
                token, p, q = r.alternatives[i][0]
                assert token == r.draft_tokens[i] and math.isclose(p, r.p[i], rel_tol=1e-5) and math.isclose(q, r.q[i], rel_tol=1e-5)
            if r.accepted < r.k:
                rejected += 1
                assert r.token in [t for t, _, _ in r.alternatives[-1]]  # the correction is listed
                values = [v for _, v in r.residual]
                assert values == sorted(values, reverse=True) and 0 < sum(values) <= 1 + 1e-5
                assert all(t != r.draft_tokens[r.accepted] for t, _ in r.residual)  # q < p there: residual 0
            html = teach.explain_round(r, tiny_pair.tokenizer, [], greedy=False)
            assert html.count('class="pos ') == len(r.alternatives)
    assert rejected > 3


def test_explain_escapes_token_text(tiny_pair):
    class Hostile:
        def decode(self, ids, skip_special_tokens=False):
            return "".join("<b>&" for _ in ids)

    dec = session.decoder(tiny_pair, session.DRAFT_MODEL, PROMPT, DecodeConfig(max_new_tokens=6, k=3, explain=2))
    html = teach.explain_round(dec.step(), Hostile(), [], greedy=True)
    assert "<b>" not in html and "&lt;b&gt;&amp;" in html


def test_theory_figure_matches_the_formulas():
    fig = teach.theory_figure(0.8, 0.1, measured={"k": 3, "tokens_per_round": 2.5, "speedup": 1.7})
    tokens, speed, best = fig.data[0], fig.data[1], fig.data[2]
    assert list(tokens.y) == pytest.approx([theory.expected_tokens(0.8, k) for k in range(1, 17)])
    assert list(speed.y) == pytest.approx([theory.speedup(0.8, k, 0.1) for k in range(1, 17)])
    assert best.x[0] == theory.best_k(0.8, 0.1) and best.y[0] == pytest.approx(max(speed.y))
    assert [d.name for d in fig.data][3:] == ["this run", "this run (measured)"]
    with pytest.raises(Exception, match="alpha must be in"):
        teach.theory_figure(1.5, 0.1)


def test_theory_view_overlays_the_last_run(tiny_catalog):
    state = ui.Session()
    list(ui.generate(*settings()[:11], False, 0, state))
    fig, line = ui.theory_view(0.7, 0.2, state)
    assert "Best k" in line and "last run" in line and fig.data[-1].name == "this run"
    alpha, c = ui.theory_from_run(state)
    assert 0 <= alpha <= 0.99 and 0 <= c <= 1


def test_sweep_grid_shape_and_values(tiny_catalog):
    status, speed_fig, alpha_fig, theory_fig, table, csv = ui.run_sweep(
        *settings(max_new=12), "1 2", "0, 1.0", ui.THIS_PROMPT)
    assert "Sweep done: 4 runs" in status
    assert len(table) == 2 * (1 + 2)  # per temperature: the target alone, then k = 1 and 2
    ours = table[table["method"] != session.TARGET_ALONE]
    assert sorted(set(ours["k"])) == ["1", "2"] and sorted(set(ours["temperature"])) == [0.0, 1.0]
    for t in (0.0, 1.0):
        base = table[(table["method"] == session.TARGET_ALONE) & (table["temperature"] == t)]["tokens_per_s"].iloc[0]
        rows = ours[ours["temperature"] == t]
        assert list(rows["speedup"]) == pytest.approx(list(rows["tokens_per_s"] / base), rel=1e-2)
    assert all(ours[ours["temperature"] == 0]["greedy_equal"])
    z = speed_fig.data[0].z  # rows: temperatures, columns: k
    assert len(z) == 2 and len(z[0]) == 2
    assert z[1][0] == pytest.approx(ours[(ours["temperature"] == 1.0) & (ours["k"] == "1")]["speedup"].iloc[0], rel=1e-2)
    assert alpha_fig.data[0].z[0][1] == pytest.approx(ours[(ours["temperature"] == 0) & (ours["k"] == "2")]["alpha"].iloc[0], rel=1e-2)
    assert csv["value"].endswith(".csv")


def test_sweep_refuses_bad_grids(tiny_catalog):
    assert "k values: &#x27;0&#x27; is out of range" in ui.run_sweep(*settings(), "0 2", "0", ui.THIS_PROMPT)[0]
    assert "temperatures: &#x27;hot&#x27; is not a number" in ui.run_sweep(*settings(), "2", "hot", ui.THIS_PROMPT)[0]
    assert "the limit is" in ui.run_sweep(*settings(), " ".join(map(str, range(1, 17))), "0 0.5 1 1.5 2", ui.THIS_PROMPT)[0]


def test_pair_comparison(tiny_catalog):
    status, fig, table, csv = ui.run_compare([TINY_PAIR, TWIN_PAIR], [session.DRAFT_MODEL, session.PROMPT_LOOKUP],
                                             3, ui.FIXED_K, 0.0, 1.0, 16, 0, PROMPT, 0)
    assert "2 pair(s) × 2 drafter(s)" in status
    assert len(table) == 2 * (1 + 2)
    twin = table[(table["pair"] == TWIN_PAIR) & (table["method"].str.startswith(session.DRAFT_MODEL))]
    assert twin["alpha"].iloc[0] == 1.0  # the twin is the target: every draft accepted
    assert all(table[table["method"] != session.TARGET_ALONE]["greedy_equal"])
    assert {d.name for d in fig.data} == set(table[table["method"] != session.TARGET_ALONE]["method"])
    assert "Pick at least one pair" in ui.run_compare([], [session.DRAFT_MODEL], 3, ui.FIXED_K, 0.0, 1.0, 16, 0, PROMPT, 0)[0]


@pytest.mark.parametrize("drafter", list(session.DRAFTERS))
def test_export_for_the_current_choice(tiny_catalog, tiny_models, drafter):
    status, hf, vllm = ui.show_export(*settings(drafter=drafter, temperature=0.7, k=5))
    assert "status-ok" in status
    ast.parse(hf)
    ast.parse(vllm)
    assert repr(str(tiny_models["target"])) in hf
    keyword = {session.DRAFT_MODEL: "assistant_model=assistant", session.PROMPT_LOOKUP: "prompt_lookup_num_tokens=5",
               session.EARLY_EXIT: "assistant_early_exit=1"}[drafter]  # the tiny target: 2 layers, a quarter is 1
    assert keyword in hf and "do_sample=True" in hf
    assert "k (draft length)" in ui.show_export(*settings(k=17))[0]


def test_early_exit_in_the_app_equals_the_target_alone(tiny_catalog):
    final = list(ui.generate(*settings(drafter=session.EARLY_EXIT)[:11], True, 1, ui.Session()))[-1]
    assert "status-ok" in final.status and "Identical outputs" in final.compare
    bad = list(ui.generate(*settings(drafter=session.EARLY_EXIT)[:11], False, 5, ui.Session()))[-1]
    assert "early-exit layer must be a whole number from 1 to 1" in bad.status
