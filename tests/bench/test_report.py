"""The report and the targets: figures per row and per method, targets read from docs/targets.json
(editing the file changes the verdict, no code change), the calibration summary line."""

from __future__ import annotations

import json
import math

import pytest

from playground.bench import grid_frame, hf, report, targets
from playground.trace.results import Result
from playground.core.errors import PlaygroundError
from playground.core.config import DecodeConfig

# the k label of the default policy's rows: what the targets' k "default" selects
DEFAULT_K = DecodeConfig.default("policy").value

ENV = {"date": "today", "commit": "abc1234", "device": "CPU, 2 cores", "torch": "2.x", "threads": 2}


def row(
    category,
    method,
    speedup,
    engine="ours",
    k=DEFAULT_K,
    calibrated=float("nan"),
    tps=None,
    drafter="draft model",
    greedy=True,
    **extra,
):
    tps = tps or 10.0 * speedup
    return Result(
        pair="p",
        category=category,
        method=method,
        drafter=drafter,
        engine=engine,
        k=k,
        temperature=0.0,
        target_precision="bf16",
        draft_precision="bf16" if drafter == "draft model" else "",
        tokens=20,
        seconds=20 / tps,
        tokens_per_s=tps,
        wall_s=20 / tps,
        speedup=speedup,
        calibrated_speedup=calibrated,
        greedy_equal=greedy if method != "target alone" else None,
        **extra,
    )


def run(code=2.0, story=1.2, qa=1.1):
    out = []
    for category, s in (("code", code), ("story", story), ("qa", qa)):
        out += [
            row(category, "target alone", 1.0, k="", drafter="target alone"),
            row(category, "draft model", s, calibrated=s * 1.1),
            row(category, "draft model", s * 0.8, k="2", calibrated=s),
            row(category, hf.HF_SAME_DRAFT, 1.0, engine="hf", tps=10.0 * s / 1.1),
            row(category, hf.HF_DEFAULTS, 1.0, engine="hf", tps=10.0 * s / 1.5),
        ]
    return out


def test_the_shipped_targets_file_is_valid_and_has_the_precision_issue_goals():
    checked = {t["metric"]: t for t in targets.load_targets()}
    assert {"speedup", "vs_best_hf", "calibrated_error", "greedy_ok"} <= set(checked)
    goals = sorted(t["goal"] for t in targets.load_targets())
    assert goals == [0.8, 1.0, 1.0, 1.15, 1.35, 1.8]


def test_targets_are_checked_against_the_run():
    results = {t["name"]: t for t in targets.check(grid_frame(run()), targets.load_targets())}
    values = list(results.values())
    assert values[0]["value"] == pytest.approx((2.0 * 1.2 * 1.1) ** (1 / 3)) and values[0]["met"] is True
    assert values[1]["value"] == pytest.approx(2.0) and values[1]["met"] is True  # code
    assert values[2]["value"] == pytest.approx(1.1) and values[2]["met"] is True  # worst category
    assert (
        values[3]["value"] == pytest.approx(1.1) and values[3]["met"] is False
    )  # the best HF (same draft): 1.1 < 1.15
    assert values[4]["value"] == pytest.approx(0.5) and values[4]["met"] is False  # errors 0.1 (k = 4), 0.25 (k = 2)
    assert values[5]["value"] == 1.0 and values[5]["met"] is True


def test_editing_a_copy_of_the_json_changes_the_check(tmp_path):
    data = json.loads(targets.TARGETS_FILE.read_text())
    path = tmp_path / "targets.json"
    path.write_text(json.dumps(data))
    before = targets.check(grid_frame(run()), targets.load_targets(path))[1]
    assert before["met"] is True  # code 2.0 >= 1.8
    data["targets"][1]["goal"] = 2.5
    path.write_text(json.dumps(data))
    after = targets.check(grid_frame(run()), targets.load_targets(path))[1]
    assert after["met"] is False and after["goal"] == 2.5
    data["targets"][1]["filter"]["category"] = "story"
    path.write_text(json.dumps(data))
    story = targets.check(grid_frame(run()), targets.load_targets(path))[1]
    assert story["value"] == pytest.approx(1.2)


def test_a_target_with_no_rows_is_not_met_nor_failed():
    frame = grid_frame([r for r in run() if r.k != DEFAULT_K])  # the default k policy did not run
    checked = targets.check(frame, targets.load_targets())
    assert checked[0]["met"] is None and math.isnan(checked[0]["value"])


def test_a_bad_targets_file_names_the_field(tmp_path):
    path = tmp_path / "targets.json"
    path.write_text(json.dumps({"targets": [{"name": "x", "metric": "speedup", "goal": 1, "how": "=>"}]}))
    with pytest.raises(PlaygroundError, match="'how'"):
        targets.load_targets(path)
    path.write_text(json.dumps({"targets": [{"name": "x", "metric": "speed", "goal": 1}]}))
    with pytest.raises(PlaygroundError, match="metric 'speed'"):
        targets.check(grid_frame(run()), targets.load_targets(path))


def test_report_has_geometric_means_precisions_calibration_and_targets(tmp_path):
    path = tmp_path / "docs" / "benchmarks.md"
    checked = report.write_report(run(), ENV, "python -m playground.bench --k 2 4", path)
    md = path.read_text()
    assert "## Geometric mean over categories" in md and "## Every run" in md
    assert (
        f"| draft model | {DEFAULT_K} | 0.00 | bf16 | bf16 | 3 |" in md
    )  # the per-method geometric mean row, precisions
    geo = (2.0 * 1.2 * 1.1) ** (1 / 3)
    assert f"| {geo:.2f} |" in md
    assert "median |predicted - measured| / measured = " in md
    for t in checked:
        assert t["name"] in md
    assert (tmp_path / "docs" / "figures" / "measured_vs_theory.html").exists()


def test_calibration_line_is_the_median_relative_error():
    frame = grid_frame(run())
    errors = frame["calibrated_error"].dropna()
    assert sorted(set(errors.round(6))) == [0.1, 0.25]
    assert f"= {errors.median():.3f} over 6 rows" in report.calibration_line(frame)


def test_greedy_cell_tells_a_near_tie_from_a_difference():
    results = [
        row("code", "target alone", 1.0, k="", drafter="target alone"),
        row("code", "draft model", 1.5, greedy=False, near_tie=True, diff_position=7, gap_spec=0.02, gap_base=0.04),
        row("code", "draft model", 1.5, k="2", greedy=False, near_tie=False, diff_position=3, gap_spec=2.5),
    ]
    cells = list(report.runs_frame(results)["greedy"])
    assert cells == ["", "near-tie at 7 (gap 0.020)", "NO at 3 (gap 2.500)"]
    ok = list(grid_frame(results)["greedy_ok"])
    assert math.isnan(ok[0]) and ok[1:] == [1.0, 0.0]
