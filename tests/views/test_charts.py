"""The run's charts: each figure's data are the run's numbers (checked against hand-counted
records, not against the helpers the charts call); an empty run draws a note, not an error."""

from __future__ import annotations

import pytest

from tests.helpers import run_all
from playground import trace
from playground.core.records import RoundRecord
from playground.core.config import DrafterKind
from playground.views import charts


def rec(i: int, k: int, accepted: int, draft_s: float = 0.0, verify_s: float = 0.0) -> RoundRecord:
    """A round that drafted k tokens (ids 1..k) and kept `accepted` of them."""
    drafts = list(range(1, k + 1))
    kind = "target" if k == 0 else "bonus" if accepted == k else "correction"
    return RoundRecord(
        round=i,
        k=k,
        draft_tokens=drafts,
        accepted=accepted,
        token=99,
        token_kind=kind,
        new_tokens=drafts[:accepted] + [99],
        draft_s=draft_s,
        verify_s=verify_s,
        total_new=0,
    )


# k / kept per round: 3/3, 3/1, 3/0, 2/2, then a plain target step, then 3/3 again.
ROUNDS = [rec(0, 3, 3), rec(1, 3, 1), rec(2, 3, 0), rec(3, 2, 2), rec(4, 0, 0), rec(5, 3, 3)]


def test_acceptance_bars_are_each_rounds_kept_over_drafted():
    bars, _ = charts.acceptance_chart(trace.frame(ROUNDS)).data
    assert list(bars.x) == [0, 1, 2, 3, 5]  # the plain step drafted nothing: no bar
    assert list(bars.y) == pytest.approx([1.0, 1 / 3, 0.0, 1.0, 1.0])


def test_acceptance_line_is_the_running_average():
    _, running = charts.acceptance_chart(trace.frame(ROUNDS)).data
    assert running.name == "running average"
    assert list(running.y) == pytest.approx([3 / 3, 4 / 6, 4 / 9, 6 / 11, 9 / 14])


def test_latency_stacks_draft_and_verify_in_ms():
    fig = charts.latency_chart(trace.frame([rec(0, 3, 1, draft_s=0.012, verify_s=0.030), rec(1, 0, 0, verify_s=0.020)]))
    draft, verify = fig.data
    assert (draft.name, verify.name) == ("draft", "verify")
    assert list(draft.y) == pytest.approx([12.0, 0.0])
    assert list(verify.y) == pytest.approx([30.0, 20.0])
    assert fig.layout.barmode == "stack"


def test_histogram_counts_rounds_by_how_many_drafts_they_kept():
    bars, _ = charts.accepted_histogram(trace.frame(ROUNDS)).data
    assert list(bars.x) == [0, 1, 2, 3]
    assert list(bars.y) == [1, 1, 1, 2]  # the plain step is not a draft round


def test_histogram_shows_what_the_iid_model_expects_at_the_runs_alpha():
    _, model = charts.accepted_histogram(trace.frame(ROUNDS)).data
    a = 9 / 11  # kept 3+1+0+2+3 of the 3+2+1+2+3 evaluated drafts
    # four rounds drafted 3 (geometric cut at 3), one drafted 2 (cut at 2)
    by_hand = [5 * (1 - a), 5 * a * (1 - a), 4 * a**2 * (1 - a) + a**2, 4 * a**3]
    assert list(model.y) == pytest.approx(by_hand)
    assert sum(model.y) == pytest.approx(5)  # one expected count per draft round


def test_position_chart_shows_kept_over_reached_per_position():
    (bars,) = charts.position_chart(trace.frame(ROUNDS)).data
    assert list(bars.x) == [1, 2, 3]
    # position 1: all five draft rounds reach it, four keep it; position 2: reached by the rounds that
    # kept position 1 (3/3, 3/1, 2/2, 3/3), kept by three; position 3: reached by the two 3/3 rounds.
    assert list(bars.y) == pytest.approx([4 / 5, 3 / 4, 2 / 2])


def test_an_empty_run_draws_notes_not_data():
    for fig in charts.all_charts(trace.frame([])):
        assert len(fig.data) == 0
        assert fig.layout.annotations[0].text in ("No rounds yet", "No draft rounds yet")
        fig.to_json()


def test_all_charts_come_in_display_order():
    figs = charts.all_charts(trace.frame(ROUNDS))
    assert [f.layout.title.text for f in figs] == [
        "Acceptance rate per round",
        "Latency per round",
        "Accepted tokens per round",
        "Acceptance by draft position",
    ]


def test_a_real_adaptive_run_charts_its_own_records(runner, tiny_spec):
    rounds = run_all(runner, tiny_spec(max_new_tokens=40, k=4, policy="heuristic"))
    drafted = [r for r in rounds if r.k > 0]
    bars, _ = charts.acceptance_chart(trace.frame(rounds)).data
    assert list(bars.x) == [r.round for r in drafted]
    assert list(bars.y) == pytest.approx([r.accepted / r.k for r in drafted])
    _, verify = charts.latency_chart(trace.frame(rounds)).data
    assert list(verify.y) == pytest.approx([r.verify_s * 1000 for r in rounds])


def test_a_target_alone_run_has_latency_but_no_draft_charts(runner, tiny_spec):
    rounds = run_all(runner, tiny_spec(drafter=DrafterKind.TARGET_ALONE, max_new_tokens=6))
    acceptance, latency, histogram, position = charts.all_charts(trace.frame(rounds))
    assert len(acceptance.data) == 0
    assert len(histogram.data) == 0
    assert len(position.data) == 0
    assert len(latency.data[1].y) == len(rounds)
