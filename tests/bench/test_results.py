"""The tables of runs come from one list (trace.results.SHOWN): every column a table shows is a column of the grid's
frame (a Result field or one grid_frame derives) or the report's "greedy" cell, so a renamed Result field fails here
instead of leaving a table with a column that is not there."""

from __future__ import annotations

import math
from dataclasses import fields, replace

import pytest

from playground.trace.results import FRAME_COLUMNS, LISTS, SHOWN, Result, columns, median_of_runs

TABLES = {"cli", "runs", "group", "geomean", "mean", "tab", "precision", "precision_cli"}


def test_every_shown_column_is_a_column_of_the_frame():
    assert [name for name, _ in SHOWN if name not in FRAME_COLUMNS and name != "greedy"] == []


def test_each_column_is_listed_once_for_known_tables():
    names = [name for name, _ in SHOWN]
    assert len(names) == len(set(names))
    assert {t for _, tables in SHOWN for t in tables.split()} == TABLES


def test_the_frame_columns_are_results_fields():
    assert FRAME_COLUMNS[: len(fields(Result)) - len(LISTS)] == [f.name for f in fields(Result) if f.name not in LISTS]


def test_a_table_reads_its_columns_in_order():
    assert columns("group") == ["pair", "method", "k", "temperature", "target_precision", "draft_precision"]
    assert columns("geomean") == ["tokens_per_s", "speedup", "vs_best_hf", "theory_speedup", "calibrated_speedup"]
    assert columns("nothing") == []


def _row(method: str, tps: float, speedup: float, engine: str = "ours") -> Result:
    return Result(
        "pair", "code", method, "draft model", engine, "4", 0.0, "bf16", "int4", 64, 64 / tps, tps, speedup=speedup
    )


def test_repeats_keep_per_row_the_repeat_with_the_median_speedup():
    """--reps: each row is one repeat's row whole (its tokens/s and speedup from the same run), the one whose speedup
    is the median; a target alone's row by tokens/s; a row without a speedup (nan) sorts first."""
    runs = [
        [_row("target alone", 10.0, 1.0), _row("draft model", 17.0, 1.70), _row("vllm", 8.0, math.nan, "vllm")],
        [_row("target alone", 12.0, 1.0), _row("draft model", 24.0, 2.00), _row("vllm", 9.0, 1.1, "vllm")],
        [_row("target alone", 8.0, 1.0), _row("draft model", 14.8, 1.85), _row("vllm", 7.0, 1.2, "vllm")],
    ]
    base, ours, vllm = median_of_runs(runs)
    assert base is runs[0][0]  # tokens/s 10 of 8, 10, 12
    assert ours is runs[2][1] and (ours.speedup, ours.tokens_per_s) == (1.85, 14.8)  # not the median tokens/s (17)
    assert vllm is runs[1][2]  # nan, 1.1, 1.2
    two = median_of_runs(runs[:2])  # an even count: the lower one
    assert two[1] is runs[0][1] and median_of_runs(runs[:1]) == runs[0]
    with pytest.raises(ValueError, match="same rows"):
        median_of_runs([runs[0], [runs[1][0], replace(runs[1][1], method="staged"), runs[1][2]]])
    with pytest.raises(ValueError, match="same rows"):
        median_of_runs([runs[0], runs[1][:2]])
