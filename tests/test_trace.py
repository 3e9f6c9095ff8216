"""Round records -> DataFrame, summary, CSV and JSON."""
import io
import json
import math

import pandas as pd

from playground import theory, trace
from playground.engine import RoundRecord


def rec(i, k, accepted, new, draft_s=0.01, verify_s=0.1, total=0, stop=""):
    kind = "target" if k == 0 else ("bonus" if accepted == k else "correction")
    return RoundRecord(i, k, list(range(k)), accepted, 99, kind, new, draft_s, verify_s, total,
                       p=[0.5] * k, q=[0.4] * k, u=[0.1] * min(k, accepted + 1), token_q=0.3, stop=stop)


ROUNDS = [
    rec(0, 4, 4, [0, 1, 2, 3, 99], total=5),
    rec(1, 4, 1, [0, 99], total=7),
    rec(2, 4, 0, [99], total=8, stop="length"),
]


def test_summary_numbers_by_hand():
    s = trace.summarize(ROUNDS, baseline_tokens_per_s=10.0)
    assert s["tokens"] == 8 and s["rounds"] == 3 and s["drafted"] == 12 and s["accepted"] == 5
    assert s["alpha"] == 5 / 12
    assert s["alpha_eval"] == 5 / (4 + 2 + 1)  # draft tokens after a rejection are never evaluated
    assert s["mean_accepted"] == 5 / 3
    assert math.isclose(s["wall_s"], 0.33)
    assert math.isclose(s["tokens_per_s"], 8 / 0.33)
    assert math.isclose(s["c"], (0.03 / 12) / (1 / 10.0))  # one target step = the baseline's time per token
    assert math.isclose(s["v"], 0.1 / (1 / 10.0))
    alone = trace.summarize(ROUNDS)  # no baseline: the verify round stands in for a target step
    assert math.isclose(alone["c"], (0.03 / 12) / 0.1) and math.isclose(alone["v"], 1.0)
    assert math.isclose(s["speedup"], 8 / 0.33 / 10.0)
    assert math.isclose(s["theory_speedup"], theory.speedup(5 / 7, 4, s["c"]))
    assert s["best_k"] == theory.best_k(5 / 7, s["c"])
    assert s["position_acceptance"] == [2 / 3, 1 / 2, 1.0, 1.0]


def test_frame_has_a_row_per_round_and_derived_columns():
    df = trace.frame(ROUNDS)
    assert len(df) == 3 and list(df["accepted"]) == [4, 1, 0]
    assert list(df["acceptance"]) == [1.0, 0.25, 0.0]
    assert all(abs(df["latency_s"] - 0.11) < 1e-12)
    assert trace.frame([]).empty


def test_baseline_rounds_have_no_acceptance():
    s = trace.summarize([rec(0, 0, 0, [5]), rec(1, 0, 0, [6])])
    assert s["tokens"] == 2 and math.isnan(s["alpha"]) and math.isnan(s["theory_speedup"])
    assert math.isnan(trace.frame([rec(0, 0, 0, [5])])["acceptance"][0])


def test_csv_and_json_round_trip():
    df = pd.read_csv(io.StringIO(trace.to_csv(ROUNDS)))
    assert len(df) == 3 and json.loads(df["new_tokens"][0]) == [0, 1, 2, 3, 99]
    doc = json.loads(trace.to_json(ROUNDS, pair="tiny", k=4))
    assert doc["pair"] == "tiny" and len(doc["rounds"]) == 3 and doc["summary"]["tokens"] == 8
    assert doc["summary"]["speedup"] is None  # NaN becomes null: the file is valid JSON
