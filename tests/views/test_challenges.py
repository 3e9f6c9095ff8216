"""The Challenges tab's pure views: the curves, the published figures beside them, the crossover marked, the text."""

from __future__ import annotations

import pandas as pd
import pytest

from playground.views import challenges as views
from playground.core.config import BASELINE, SPECULATIVE


def batch_frame(speedups: dict[int, float], equal: bool = True) -> pd.DataFrame:
    rows = []
    for b, s in speedups.items():
        rows.append(
            dict(
                batch_size=b,
                method=BASELINE,
                tokens_per_s=10.0 * b,
                speedup=1.0,
                greedy_equal=True,
                near_ties=0,
                real_differences=0,
            )
        )
        rows.append(
            dict(
                batch_size=b,
                method=SPECULATIVE,
                tokens_per_s=10.0 * b * s,
                speedup=s,
                greedy_equal=equal,
                near_ties=0 if equal else 1,
                real_differences=0,
            )
        )
    return pd.DataFrame(rows)


def test_the_crossover_is_the_first_batch_size_under_one():
    assert views.crossover(batch_frame({1: 1.8, 2: 1.3, 4: 0.9, 8: 1.1, 16: 0.6})) == 4
    assert views.crossover(batch_frame({1: 1.8, 2: 1.3})) is None
    assert views.crossover(pd.DataFrame()) is None


def test_batch_figure_draws_both_methods_the_speedup_the_survey_and_the_crossover():
    fig = views.batch_figure(batch_frame({1: 1.8, 2: 1.3, 4: 0.9, 8: 0.7}))
    by_name = {t.name: t for t in fig.data}
    assert list(by_name[SPECULATIVE].y) == [18.0, 26.0, 36.0, 56.0] and list(by_name[BASELINE].x) == [1, 2, 4, 8]
    assert list(by_name["speedup (this machine)"].y) == [1.8, 1.3, 0.9, 0.7]
    survey = [t for t in fig.data if t.legendgroup == "survey"]
    assert [list(t.y) for t in survey] == [[2.5, 2.85], [0.48, 0.88]] and [t.x[0] for t in survey] == [1, 16]
    mark = by_name["under 1 from batch 4"]
    assert list(mark.x) == [4] and list(mark.y) == [0.9]
    assert not any(t.name.startswith("under 1") for t in views.batch_figure(batch_frame({1: 2.0, 2: 1.5})).data)
    assert (
        fig.layout.xaxis.title.text == fig.layout.xaxis2.title.text == "batch size" and fig.layout.xaxis.type == "log"
    )


def test_context_figure_draws_speedup_costs_and_memory_against_the_context():
    frame = pd.DataFrame(
        dict(
            context=[1024, 64, 256],
            speedup=[1.1, 1.6, 1.4],
            decode_speedup=[1.3, 1.7, 1.5],
            alpha=[0.6, 0.7, 0.65],
            draft_ms_per_token=[30, 20, 22],
            verify_ms_per_round=[90, 60, 70],
            target_step_ms=[80, 55, 60],
            kv_mib_target=[28.0, 1.75, 7.0],
            kv_mib_draft=[12.0, 0.75, 3.0],
            kv_mib_estimate=[40.0, 2.5, 10.0],
        )
    )
    fig = views.context_figure(frame)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["speedup (whole run)"].x) == [64, 256, 1024]  # sorted by context
    assert list(by_name["speedup (whole run)"].y) == [1.6, 1.4, 1.1]
    assert list(by_name["KV target"].y) == [1.75, 7.0, 28.0]
    assert {"draft, per token", "verify, per round", "target alone, per step", "KV both, from the configs"} <= set(
        by_name
    )


def test_precision_figure_is_a_grid_of_speedups_with_the_peers_numbers_beside_it():
    frame = pd.DataFrame(
        dict(
            method=[
                BASELINE,
                "draft model (fp32)",
                "draft model (int8)",
                BASELINE,
                "draft model (fp32)",
                "draft model (int8)",
            ],
            target_precision=["fp32"] * 3 + ["bf16"] * 3,
            draft_precision=["", "fp32", "int8", "", "fp32", "int8"],
            speedup=[1.0, 1.2, 1.5, 1.0, 0.9, 1.3],
            alpha=[None, 0.7, 0.6, None, 0.7, 0.6],
            c=[None, 0.3, 0.2, None, 0.5, 0.3],
            v=[None, 1.5, 1.5, None, 1.1, 1.1],
            greedy_equal=[None, True, True, None, True, True],
        )
    )
    fig = views.precision_figure(frame)
    heat, bars = fig.data
    assert list(heat.y) == ["target bf16", "target fp32"] and list(heat.x) == ["draft fp32", "draft int8"]
    assert [list(row) for row in heat.z] == [[0.9, 1.3], [1.2, 1.5]]
    assert heat.text[1][1].startswith("1.50x<br>α 0.60, c 0.20, v 1.50")
    assert list(bars.y) == [3.0, 1.5, 1.0]  # llama.cpp PR 5625: F16, Q8_0, Q4_K targets


@pytest.mark.parametrize("effect", views.EFFECTS)
def test_every_effect_has_sourced_reference_numbers_and_a_mechanism(effect):
    assert "arXiv:2411.13157" in views.REFERENCES[effect]
    assert views.MECHANISMS[effect].startswith("**Why.**") and len(views.MECHANISMS[effect]) > 300
    assert "compute" in views.MECHANISMS[views.BATCH] and "idle compute" in views.MECHANISMS[views.BATCH]
    assert "2.5-2.85x" in views.REFERENCES[views.BATCH] and "0.48-0.88x" in views.REFERENCES[views.BATCH]
    assert "7x" in views.REFERENCES[views.PRECISION] and views.LLAMA_CPP in views.REFERENCES[views.PRECISION]


def test_empty_frames_give_a_note_instead_of_data():
    for figure in (views.batch_figure, views.context_figure, views.precision_figure):
        fig = figure(pd.DataFrame())
        assert not fig.data and "Run the" in fig.layout.annotations[0].text


def test_the_headline_says_what_ran_and_whether_outputs_matched():
    line = views.headline(views.BATCH, batch_frame({1: 1.8, 4: 0.9}))
    assert "B=1: 1.80x, B=4: 0.90x" in line and "under 1 from batch size 4" in line
    assert "Every greedy output equals" in line
    ties = views.headline(views.BATCH, batch_frame({1: 1.8}, equal=False))
    assert "except 1 that differ after a near-tie" in ties and "REAL" not in ties
    context = pd.DataFrame(
        dict(context=[256, 64], speedup=[1.2, 1.5], greedy_equal=[True, False], near_tie=[None, False])
    )
    assert views.headline(views.CONTEXT, context).startswith(
        "Speedup by context length (tokens): 64: 1.50x, 256: 1.20x"
    )
    assert "1 REAL DIFFERENCES" in views.headline(views.CONTEXT, context)
