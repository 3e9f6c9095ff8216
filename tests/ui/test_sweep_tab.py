"""The Sweep tab's callback on the tiny pair: the grid's shape and values, and refused grids."""

from __future__ import annotations

from pathlib import Path

import pytest

from playground import bench
from playground.ui.state import SessionState
from playground.ui.sweep_tab import BUILT_IN, THIS_PROMPT, run_sweep
from ui_support import controls

BASELINE = "target alone"


def sweep(runner, ks, temps, prompt_set=THIS_PROMPT, **changes):
    return run_sweep(runner, SessionState(), controls(**changes), ks, temps, prompt_set)


def test_sweep_grid_shape_and_values(tiny_catalog, runner):
    status, speed_fig, alpha_fig, theory_fig, table, csv = sweep(runner, "1 2", "0, 1.0", max_new_tokens=12)
    assert "Sweep done: 4 runs, 1 prompt(s)" in status
    assert len(table) == 2 * (1 + 2)  # per temperature: the target alone, then k = 1 and 2
    ours = table[table["method"] != BASELINE]
    assert sorted(set(ours["k"])) == ["1", "2"] and sorted(set(ours["temperature"])) == [0.0, 1.0]
    for t in (0.0, 1.0):
        base = table[(table["method"] == BASELINE) & (table["temperature"] == t)]["tokens_per_s"].iloc[0]
        rows = ours[ours["temperature"] == t]
        assert list(rows["speedup"]) == pytest.approx(list(rows["tokens_per_s"] / base), rel=1e-2)
    assert all(ours[ours["temperature"] == 0]["greedy_equal"])
    z = speed_fig.data[0].z  # rows: temperatures, columns: k
    assert len(z) == 2 and len(z[0]) == 2
    assert z[1][0] == pytest.approx(
        ours[(ours["temperature"] == 1.0) & (ours["k"] == "1")]["speedup"].iloc[0], rel=1e-2
    )
    assert alpha_fig.data[0].z[0][1] == pytest.approx(
        ours[(ours["temperature"] == 0) & (ours["k"] == "2")]["alpha"].iloc[0], rel=1e-2
    )
    assert "drafter" not in table and "calibrated_speedup" in table
    path = Path(csv["value"])
    assert path.name == "sweep.csv" and "calibrated_error" in path.read_text().splitlines()[0]  # the CSV: every column


def test_sweep_refuses_bad_grids(tiny_catalog, runner):
    assert "k values: &#x27;0&#x27; is out of range" in sweep(runner, "0 2", "0")[0]
    assert "temperatures: &#x27;hot&#x27; is not a number" in sweep(runner, "2", "hot")[0]
    assert "k values: &#x27;٣&#x27; is not a number" in sweep(runner, "2 ٣", "0")[0]  # an Arabic-Indic 3 (issue 55)
    too_many = sweep(runner, " ".join(map(str, range(1, 17))), "0 0.5 1 1.5 2")[0]
    assert f"the limit is {bench.MAX_CELLS}" in too_many and "85 runs" in too_many  # 80 + 5 baselines
    assert f"the limit is {bench.MAX_CELLS}" in sweep(runner, "1 2 3 4 5 6 7 8 9 10 11", "0", BUILT_IN)[0]  # 66 + 6
    assert "prompt is empty" in sweep(runner, "2", "0", prompt=" ")[0]
    assert "Unknown prompt set" in sweep(runner, "2", "0", "everything")[0]


def test_a_token_tree_on_the_left_adds_a_column_next_to_the_k_values(tiny_catalog, runner):
    status, speed_fig, _, _, table, _ = sweep(runner, "2", "0", max_new_tokens=8, tree="2-1")
    assert "Sweep done: 2 runs" in status
    ours = table[table["method"] != BASELINE]
    assert sorted(ours["k"]) == ["2", "tree 2-1"] and all(ours["greedy_equal"])
    assert list(speed_fig.data[0].x) == ["2", "tree 2-1"]
