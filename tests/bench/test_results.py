"""The tables of runs come from one list (bench.results.SHOWN): every column a table shows is a column of the grid's
frame (a Result field or one grid_frame derives) or the report's "greedy" cell, so a renamed Result field fails here
instead of leaving a table with a column that is not there."""

from __future__ import annotations

from dataclasses import fields

from playground.bench.results import FRAME_COLUMNS, LISTS, SHOWN, Result, columns

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
