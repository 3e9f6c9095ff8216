"""The theory explorer's figures: Leviathan's ideal curve, this machine's calibrated curve, the
best k of each starred, a run overlaid; the V(n) / V(1) profile chart. Expected values are
written out here from the paper's formulas, not taken from playground.core.theory."""

from __future__ import annotations

import math

import pytest

from tests.helpers import run_all
from playground.core import theory
from playground import trace
from playground.core.errors import PlaygroundError
from playground.views.theory import measured_point, profile_figure, theory_figure

KS = list(range(1, 17))


def expected_tokens(alpha: float, k: int) -> float:
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def ideal(alpha: float, k: int, c: float) -> float:
    """Leviathan et al., theorem 3.8: v = 1."""
    return expected_tokens(alpha, k) / (k * c + 1)


# V(n) = 1 + 0.5 (n - 1) ms, linear between the two measured n: checking k + 1 tokens costs v(k) = 1 + 0.5 k steps.
LINEAR = theory.CostProfile({1: 0.001, 17: 0.009})


def calibrated(alpha: float, k: int, c: float) -> float:
    return expected_tokens(alpha, k) / (k * c + 1 + 0.5 * k)


def trace_named(fig, name: str):
    matches = [d for d in fig.data if d.name == name]
    assert len(matches) == 1, [d.name for d in fig.data]
    return matches[0]


def test_left_panel_is_the_expected_tokens_per_round():
    tokens = trace_named(theory_figure(0.8, 0.1), "theory: tokens / round")
    assert list(tokens.x) == KS
    assert list(tokens.y) == pytest.approx([expected_tokens(0.8, k) for k in KS])


def test_ideal_curve_is_leviathans_speedup_with_v_equal_1():
    curve = trace_named(theory_figure(0.8, 0.1), "ideal (v = 1)")
    assert list(curve.x) == KS
    assert list(curve.y) == pytest.approx([ideal(0.8, k, 0.1) for k in KS])


def test_the_best_ideal_k_is_starred_at_the_top_of_its_curve():
    best_k = max(KS, key=lambda k: ideal(0.8, k, 0.1))
    star = trace_named(theory_figure(0.8, 0.1), f"best k = {best_k} (ideal)")
    assert star.marker.symbol == "star"
    assert (star.x[0], star.y[0]) == (best_k, pytest.approx(ideal(0.8, best_k, 0.1)))


def test_without_a_profile_there_is_no_calibrated_curve():
    names = [d.name for d in theory_figure(0.8, 0.1).data]
    assert "this machine (measured v(k))" not in names
    assert not any(n.endswith("(this machine)") for n in names)


def test_a_profile_adds_this_machines_curve_with_the_measured_v():
    curve = trace_named(theory_figure(0.8, 0.1, profile=LINEAR), "this machine (measured v(k))")
    assert list(curve.x) == KS
    assert list(curve.y) == pytest.approx([calibrated(0.8, k, 0.1) for k in KS])


def test_the_best_calibrated_k_is_starred_and_is_smaller_when_checking_costs_more():
    best_ideal = max(KS, key=lambda k: ideal(0.8, k, 0.1))
    best_here = max(KS, key=lambda k: calibrated(0.8, k, 0.1))
    assert best_here < best_ideal  # the example is one where the two disagree
    star = trace_named(theory_figure(0.8, 0.1, profile=LINEAR), f"best k = {best_here} (this machine)")
    assert star.marker.symbol == "star"
    assert (star.x[0], star.y[0]) == (best_here, pytest.approx(calibrated(0.8, best_here, 0.1)))


def test_k_max_limits_the_curves():
    fig = theory_figure(0.9, 0.0, k_max=4, profile=LINEAR)
    assert list(trace_named(fig, "ideal (v = 1)").x) == [1, 2, 3, 4]
    assert list(trace_named(fig, "this machine (measured v(k))").x) == [1, 2, 3, 4]
    assert trace_named(fig, "best k = 4 (ideal)").x[0] == 4  # c = 0: drafting is free, the longest k wins


def test_a_measured_run_is_overlaid_on_both_panels():
    fig = theory_figure(0.8, 0.1, measured={"k": 3, "tokens_per_round": 2.5, "speedup": 1.7})
    tokens, speed = trace_named(fig, "this run"), trace_named(fig, "this run (measured)")
    assert (tokens.x[0], tokens.y[0]) == (3, 2.5)
    assert (speed.x[0], speed.y[0]) == (3, 1.7)


def test_a_run_without_a_baseline_has_no_measured_speedup_point():
    fig = theory_figure(0.8, 0.1, measured={"k": 3, "tokens_per_round": 2.5, "speedup": math.nan})
    names = [d.name for d in fig.data]
    assert "this run" in names
    assert "this run (measured)" not in names


@pytest.mark.parametrize("alpha, c", [(1.5, 0.1), (-0.1, 0.1), (0.5, -1.0), (math.nan, 0.1), (0.5, math.inf)])
def test_out_of_range_alpha_or_c_is_refused(alpha, c):
    with pytest.raises(PlaygroundError, match="alpha must be in"):
        theory_figure(alpha, c)


def test_measured_point_rounds_the_mean_draft_length():
    summary = {"mean_k": 3.4, "tokens_per_round": 2.5, "speedup": 1.7}
    assert measured_point(summary) == {"k": 3, "tokens_per_round": 2.5, "speedup": 1.7}
    assert measured_point({"mean_k": 0.4, "tokens_per_round": 1.2, "speedup": math.nan})["k"] == 1


@pytest.mark.parametrize(
    "summary", [{}, None, {"mean_k": 0.0, "tokens_per_round": 1.0}, {"mean_k": math.nan, "tokens_per_round": 1.0}]
)
def test_a_run_without_draft_rounds_has_no_measured_point(summary):
    assert measured_point(summary) is None


def test_a_real_runs_summary_is_overlaid_at_its_mean_k(runner, tiny_spec):
    summary = trace.summarize(run_all(runner, tiny_spec(max_new_tokens=24, k=3)))
    point = measured_point(summary)
    fig = theory_figure(0.5, 0.2, measured=point)
    run = trace_named(fig, "this run")
    assert run.x[0] == round(summary["mean_k"])
    assert run.y[0] == pytest.approx(summary["tokens_per_round"])


def test_profile_chart_shows_v_of_n_in_target_steps():
    fig = profile_figure({1: 0.010, 2: 0.012, 4: 0.020})
    (curve,) = fig.data
    assert list(curve.x) == [1, 2, 4]
    assert list(curve.y) == pytest.approx([1.0, 1.2, 2.0])
    assert "cost of checking n tokens at once, in target steps" in fig.layout.title.text.lower()


def test_profile_chart_sorts_n():
    (curve,) = profile_figure({4: 0.020, 1: 0.010, 2: 0.012}).data
    assert list(curve.x) == [1, 2, 4]


def test_profile_chart_draws_the_ideal_as_a_dotted_line_at_1():
    (line,) = profile_figure({1: 0.010, 2: 0.012}).layout.shapes
    assert (line.y0, line.y1) == (1, 1)
    assert line.line.dash == "dot"


def test_an_empty_profile_draws_a_note():
    fig = profile_figure({})
    assert len(fig.data) == 0
    assert "No cost profile yet" in fig.layout.annotations[0].text
