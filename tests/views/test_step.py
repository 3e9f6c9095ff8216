"""Step-through: one round explained position by position (the verdict of each draft token, its
p and q against the likeliest alternatives, the residual a correction is drawn from)."""

from __future__ import annotations

import re

import pytest

from playground.core.records import RoundRecord
from playground.views.step import explain_round
from tests.helpers import run_all, Hostile, Words

NAN = float("nan")


def record(**fields) -> RoundRecord:
    base = dict(round=0, draft_s=0.0, verify_s=0.0, total_new=0)
    return RoundRecord(**{**base, **fields})


# Sampling: " the" kept (u = 0.3 < min(1, 0.6/0.5) = 1), " cat" rejected (u = 0.9 >= 0.1/0.4 = 0.25),
# " sat" never evaluated; the correction " dog" drawn from the residual.
SAMPLED = record(
    k=3,
    draft_tokens=[1, 2, 3],
    accepted=1,
    token=4,
    token_kind="correction",
    new_tokens=[1, 4],
    p=[0.5, 0.4, 0.3],
    q=[0.6, 0.1, 0.2],
    u=[0.3, 0.9],
    alternatives=[[(1, 0.5, 0.6), (5, 0.2, 0.1)], [(2, 0.4, 0.1), (4, 0.1, 0.5)]],
    residual=[(4, 0.8), (5, 0.2)],
)
# Greedy, every draft kept, then the bonus token " sat".
BONUS = record(
    k=2,
    draft_tokens=[1, 2],
    accepted=2,
    token=3,
    token_kind="bonus",
    new_tokens=[1, 2, 3],
    p=[0.9, 0.8],
    q=[0.7, 0.6],
    alternatives=[[(1, 0.9, 0.7), (5, 0.05, 0.2)], [(2, 0.8, 0.6), (4, 0.1, 0.3)], [(3, NAN, 0.5), (6, NAN, 0.1)]],
)
# Greedy, the first draft rejected: the target's argmax is " dog".
REJECTED = record(
    k=3,
    draft_tokens=[1, 2, 3],
    accepted=0,
    token=4,
    token_kind="correction",
    new_tokens=[4],
    p=[0.6, 0.5, 0.4],
    q=[0.2, 0.1, 0.1],
    alternatives=[[(1, 0.6, 0.2), (4, 0.1, 0.7)]],
)
PLAIN = record(k=0, draft_tokens=[], accepted=0, token=5, token_kind="target", new_tokens=[5])


def positions(html: str) -> list[str]:
    return re.findall(r'class="pos pos-(\w+)"', html)


def test_sampled_verdict_compares_u_with_min_1_q_over_p():
    html = explain_round(SAMPLED, Words(), [], greedy=False)
    assert "sampling: keep draft token x when u < min(1, q(x)/p(x))" in html
    assert (
        "q: the target&#x27;s probability, p: the draft&#x27;s" in html
        or "q: the target's probability, p: the draft's" in html
    )
    assert "u = 0.300 < min(1, q/p) = 1.000 → accepted" in html
    assert "u = 0.900 ≥ min(1, q/p) = 0.250 → rejected" in html


def test_each_evaluated_position_is_classed_by_its_verdict():
    assert positions(explain_round(SAMPLED, Words(), [], greedy=False)) == ["accepted", "rejected"]
    assert positions(explain_round(BONUS, Words(), [], greedy=True)) == ["accepted", "accepted", "bonus"]
    assert positions(explain_round(REJECTED, Words(), [], greedy=True)) == ["rejected"]


def test_a_sampled_rejection_shows_the_residual_the_correction_is_drawn_from():
    html = explain_round(SAMPLED, Words(), [], greedy=False)
    assert "the correction is drawn from the residual norm(max(0, q − p))" in html
    residual = html.split("residual norm(max(0, q − p))")[1]
    assert re.search(
        r"<code> dog</code> <span class=\"tok-id\">#4</span> <span class=\"alt-mark\">drawn</span>", residual
    )
    assert "0.800" in residual
    assert "0.200" in residual


def test_the_draft_and_the_correction_are_marked_among_the_alternatives():
    html = explain_round(SAMPLED, Words(), [], greedy=False)
    assert '<code> the</code> <span class="tok-id">#1</span> <span class="alt-mark">draft</span>' in html
    assert '<code> dog</code> <span class="tok-id">#4</span> <span class="alt-mark">correction</span>' in html


def test_p_and_q_are_drawn_as_bars_with_their_numbers():
    html = explain_round(SAMPLED, Words(), [], greedy=False)
    assert '<span class="bar bar-p" style="width:40.0%"></span><span class="bar-num">0.500</span>' in html
    assert '<span class="bar bar-q" style="width:48.0%"></span><span class="bar-num">0.600</span>' in html


def test_drafts_after_a_rejection_are_listed_as_not_evaluated():
    html = explain_round(REJECTED, Words(), [], greedy=True)
    assert '<p class="unevaluated">not evaluated (after the rejection): <code> cat sat</code></p>' in html
    assert "not evaluated" not in explain_round(BONUS, Words(), [], greedy=True)


def test_greedy_verdict_compares_the_draft_with_argmax_q():
    html = explain_round(BONUS, Words(), [], greedy=True)
    assert "argmax q is <code> the</code> = the draft → accepted" in html
    assert "argmax q is <code> cat</code> = the draft → accepted" in html
    rejected = explain_round(REJECTED, Words(), [], greedy=True)
    assert "argmax q is <code> dog</code> ≠ the draft → rejected" in rejected
    assert "greedy: the correction is the argmax of q" in rejected


def test_full_acceptance_explains_the_bonus_token():
    html = explain_round(BONUS, Words(), [], greedy=True)
    assert "the drafter proposed 2 tokens; the target kept 2 and added a bonus token" in html
    assert "all drafts accepted: the bonus token is the argmax q at the next position" in html
    assert '<span class="alt-mark">bonus</span>' in html
    bonus_table = html.split("all drafts accepted")[1]
    assert "p (draft)" not in bonus_table  # the bonus has no draft probability


def test_a_plain_target_step_says_there_was_no_draft():
    html = explain_round(PLAIN, Words(), [], greedy=True)
    assert "Round 1: no draft (k = 0), one plain target step" in html
    assert positions(html) == []


def test_blank_tokens_are_made_visible():
    html = explain_round(BONUS, Words(), [], greedy=True)
    assert "<code>␣</code>" in html  # token 6 is a single space


def test_token_text_is_escaped():
    html = explain_round(SAMPLED, Hostile(), [], greedy=False)
    assert "<b>" not in html
    assert "&lt;b&gt;&amp;" in html


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_evaluated_position_of_a_real_run_is_explained(runner, tiny_spec, tiny_pair, temperature):
    rounds = run_all(runner, tiny_spec(max_new_tokens=20, k=4, temperature=temperature, seed=5, explain=3))
    word = "argmax q" if temperature == 0 else "u = "
    context: list[int] = []
    drafted = [r for r in rounds if r.k > 0]
    assert drafted
    for r in rounds:
        html = explain_round(r, tiny_pair.tokenizer, context, greedy=temperature == 0)
        assert len(positions(html)) == len(r.alternatives)
        assert positions(html).count("rejected") == (r.accepted < r.k)
        if r.k > 0:
            assert word in html
        context += r.new_tokens


def test_a_real_sampled_rejection_shows_its_residual(runner, tiny_spec, tiny_pair):
    shown = 0
    for seed in range(4):
        for r in run_all(runner, tiny_spec(max_new_tokens=20, k=4, temperature=1.0, seed=seed, explain=3)):
            if r.accepted < r.k and r.residual:
                html = explain_round(r, tiny_pair.tokenizer, [], greedy=False)
                residual = html.split("norm(max(0, q − p))")[1]
                for token, r_value in r.residual:
                    assert f'<span class="tok-id">#{token}</span>' in residual
                    assert f'<span class="bar-num">{r_value:.3f}</span>' in residual
                shown += 1
    assert shown > 0
