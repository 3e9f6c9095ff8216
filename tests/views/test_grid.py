"""Sweep heatmaps and pair-comparison bars: views of a benchmark grid (built by hand here), the
target-alone rows left out, cells averaged over prompts, k in numeric order."""

from __future__ import annotations

import pandas as pd
import pytest

from playground.views.grid import compare_figure, sweep_figures

COLUMNS = [
    "pair",
    "category",
    "method",
    "k",
    "temperature",
    "tokens_per_s",
    "speedup",
    "alpha",
    "mean_accepted",
    "theory_speedup",
]


def row(
    k: str,
    temperature: float,
    speedup: float,
    alpha: float,
    pair: str = "A",
    method: str = "draft model",
    category: str = "story",
    tokens_per_s: float = 10.0,
    mean_accepted: float = 2.0,
) -> dict:
    return dict(
        pair=pair,
        category=category,
        method=method,
        k=k,
        temperature=temperature,
        tokens_per_s=tokens_per_s,
        speedup=speedup,
        alpha=alpha,
        mean_accepted=mean_accepted,
        theory_speedup=speedup + 0.5,
    )


def baseline(temperature: float, pair: str = "A") -> dict:
    return row("", temperature, 1.0, float("nan"), pair=pair, method="target alone", tokens_per_s=5.0)


SWEEP = pd.DataFrame(
    [
        baseline(0.0),
        baseline(1.0),
        row("10", 0.0, 2.0, 0.9),
        row("2", 0.0, 1.5, 0.8),
        row("2", 1.0, 1.2, 0.6),
        row("10", 1.0, 0.7, 0.4),
        row("2", 0.0, 1.1, 0.6, category="code"),  # a second prompt: the (k = 2, T = 0) cell is the mean
    ],
    columns=COLUMNS,
)


def test_sweep_heatmaps_are_temperature_by_k_with_k_in_numeric_order():
    speed, alpha, theory = sweep_figures(SWEEP)
    heat = speed.data[0]
    assert list(heat.x) == ["2", "10"]
    assert list(heat.y) == ["0", "1"]
    assert [list(r) for r in heat.z] == [[pytest.approx(1.3), 2.0], [1.2, 0.7]]


def test_sweep_shows_alpha_and_theory_for_the_same_cells():
    _, alpha, theory = sweep_figures(SWEEP)
    assert [list(r) for r in alpha.data[0].z] == [[pytest.approx(0.7), 0.9], [0.6, 0.4]]
    assert [list(r) for r in theory.data[0].z] == [[pytest.approx(1.8), 2.5], [1.7, 1.2]]


def test_sweep_leaves_the_target_alone_out():
    speed, _, _ = sweep_figures(SWEEP)
    assert "" not in list(speed.data[0].x)  # the baseline's k is empty


def test_sweep_speedup_is_centred_on_1():
    speed, alpha, _ = sweep_figures(SWEEP)
    assert speed.data[0].zmid == 1.0
    assert alpha.data[0].zmid is None


def test_sweep_titles_say_what_each_map_is():
    titles = [f.layout.title.text for f in sweep_figures(SWEEP)]
    assert titles == [
        "Measured speedup over the target alone",
        "Acceptance rate α",
        "Theory: speedup for the measured α and c",
    ]


def test_policy_names_come_after_the_numbers():
    grid = pd.DataFrame(
        [
            row("theory", 0.0, 1.1, 0.5),
            row("4", 0.0, 1.0, 0.5),
            row("adaptive", 0.0, 1.2, 0.5),
            row("16", 0.0, 1.0, 0.5),
        ],
        columns=COLUMNS,
    )
    assert list(sweep_figures(grid)[0].data[0].x) == ["4", "16", "adaptive", "theory"]


@pytest.mark.parametrize(
    "grid", [pd.DataFrame(columns=COLUMNS), pd.DataFrame([baseline(0.0)], columns=COLUMNS), pd.DataFrame()]
)
def test_an_empty_sweep_draws_a_note(grid):
    for fig in sweep_figures(grid):
        assert len(fig.data) == 0
        assert fig.layout.annotations[0].text == "Run a sweep to see the grid"


COMPARE = pd.DataFrame(
    [
        baseline(0.0, "A"),
        baseline(0.0, "B"),
        row("3", 0.0, 1.4, 0.7, pair="A", method="draft model", tokens_per_s=14.0, mean_accepted=2.1),
        row("3", 0.0, 1.6, 0.9, pair="A", method="draft model", tokens_per_s=16.0, mean_accepted=2.5, category="code"),
        row("3", 0.0, 0.9, 0.2, pair="A", method="prompt lookup", tokens_per_s=9.0, mean_accepted=0.5),
        row("3", 0.0, 2.0, 1.0, pair="B", method="draft model", tokens_per_s=20.0, mean_accepted=3.0),
        row("3", 0.0, 1.1, 0.4, pair="B", method="prompt lookup", tokens_per_s=11.0, mean_accepted=1.0),
    ],
    columns=COLUMNS,
)


def test_compare_draws_one_bar_series_per_drafter_in_each_panel():
    fig = compare_figure(COMPARE)
    assert [d.name for d in fig.data] == ["draft model"] * 4 + ["prompt lookup"] * 4
    assert [d.showlegend for d in fig.data] == [True, False, False, False] * 2
    assert "target alone" not in {d.name for d in fig.data}


def test_compare_bars_are_the_means_over_prompts_per_pair():
    fig = compare_figure(COMPARE)
    tokens_per_s, alpha, accepted, speedup = fig.data[:4]  # the draft model's four panels, bars along x
    assert list(tokens_per_s.y) == ["A", "B"] and tokens_per_s.orientation == "h"
    assert list(tokens_per_s.x) == pytest.approx([15.0, 20.0])
    assert list(alpha.x) == pytest.approx([0.8, 1.0])
    assert list(accepted.x) == pytest.approx([2.3, 3.0])
    assert list(speedup.x) == pytest.approx([1.5, 2.0])
    assert list(fig.data[7].x) == pytest.approx([0.9, 1.1])  # prompt lookup's speedup


def test_compare_shows_the_drafts_cost_and_short_pair_names():
    grid = COMPARE.assign(
        c=[float("nan")] * 2 + [0.2, 0.4, 0.0, 0.3, 0.0],
        pair=lambda f: f["pair"].map({"A": "Small -> Big (offline)", "B": "Tiny -> Big (offline, cross)"}),
    )
    fig = compare_figure(grid)
    assert [a.text for a in fig.layout.annotations][-1].startswith("draft cost c")
    c = fig.data[4]  # the draft model's fifth panel
    assert list(c.y) == ["Small -> Big", "Tiny -> Big"] and list(c.x) == pytest.approx([0.3, 0.3])
    assert list(c.customdata) == ["Small -> Big (offline)", "Tiny -> Big (offline, cross)"]  # the full name on hover


def test_compare_panels_are_titled():
    titles = [a.text for a in compare_figure(COMPARE).layout.annotations]
    assert titles == ["tokens/s", "α", "mean accepted / round", "speedup"]


def test_each_drafter_has_its_own_colour():
    fig = compare_figure(COMPARE)
    assert fig.data[0].marker.color != fig.data[4].marker.color
    assert fig.data[0].marker.color == fig.data[3].marker.color


def test_an_empty_comparison_draws_a_note():
    fig = compare_figure(pd.DataFrame([baseline(0.0)], columns=COLUMNS))
    assert len(fig.data) == 0
    assert "Run a comparison to see the bars" in [a.text for a in fig.layout.annotations]
