"""Round records -> DataFrame, summary, CSV and JSON."""

import io
import json
import math
from dataclasses import replace

import pandas as pd

from playground.trace import sametext, tracefile
from playground.core import theory
from playground import trace
from playground.core.records import LOADED, CrossExtras, RoundRecord, TreeExtras


def rec(i, k, accepted, new, draft_s=0.01, verify_s=0.1, total=0, stop="", margins=None):
    kind = "target" if k == 0 else ("bonus" if accepted == k else "correction")
    return RoundRecord(
        i,
        k,
        list(range(k)),
        accepted,
        99,
        kind,
        new,
        draft_s,
        verify_s,
        total,
        p=[0.5] * k,
        q=[0.4] * k,
        u=[0.1] * min(k, accepted + 1),
        token_q=0.3,
        stop=stop,
        margins=margins if margins is not None else [],
    )


ROUNDS = [
    rec(0, 4, 4, [0, 1, 2, 3, 99], total=5),
    rec(1, 4, 1, [0, 99], total=7),
    rec(2, 4, 0, [99], total=8, stop="length"),
]


BASELINE = [rec(i, 0, 0, [7], draft_s=0.0, verify_s=0.1) for i in range(10)]  # 10 tokens in 1 s: 10 tokens/s
PROFILE = theory.CostProfile({1: 0.08, 5: 0.1}, draft_s=0.0025)


def test_summary_numbers_by_hand():
    s = trace.summarize(ROUNDS, BASELINE, PROFILE)
    assert s["tokens"] == 8 and s["rounds"] == 3 and s["drafted"] == 12 and s["accepted"] == 5
    assert s["alpha"] == 5 / 12
    assert s["alpha_eval"] == 5 / (4 + 2 + 1)  # draft tokens after a rejection are never evaluated
    assert s["mean_accepted"] == 5 / 3
    assert math.isclose(s["wall_s"], 0.33)
    assert math.isclose(s["tokens_per_s"], 8 / 0.33)
    assert s["step_source"] == trace.CALIBRATION and s["step_s"] == 0.08  # one target step = V(1) of the profile
    c = (0.02 / 8) / 0.08  # rounds 1 and 2 (round 0 also filled the draft's cache): 8 drafts in 0.02 s; V(1) = 0.08
    assert math.isclose(s["c"], c)
    assert math.isclose(s["v"], 0.1 / 0.08)  # rounds 1 and 2 (round 0 also scored the prompt)
    assert math.isclose(s["baseline_tokens_per_s"], 10.0)
    assert math.isclose(s["speedup"], 8 / 0.33 / 10.0)
    assert math.isclose(s["theory_speedup"], theory.speedup(5 / 7, 4, c))  # Leviathan's ideal, v = 1, k = 4
    # the calibrated model for this run: 8 tokens, its first round (0.11 s) paid by both
    assert math.isclose(s["calibrated_speedup"], theory.run_speedup(5 / 7, 4, c, PROFILE, 8, 0.11))
    assert s["best_k"] == theory.best_k(5 / 7, c)
    assert s["position_acceptance"] == [2 / 3, 1 / 2, 1.0, 1.0]


def test_time_to_first_token_is_the_first_rounds_draft_and_verify_seconds():
    rounds = [replace(ROUNDS[0], draft_s=0.3, verify_s=1.2), *ROUNDS[1:]]
    assert math.isclose(trace.summarize(rounds)["ttft_s"], 1.5)
    assert math.isnan(trace.summarize([])["ttft_s"])


def test_c_and_the_calibrated_prediction_do_not_depend_on_the_baseline():
    with_base, alone = trace.summarize(ROUNDS, BASELINE, PROFILE), trace.summarize(ROUNDS, None, PROFILE)
    for figure in ("c", "v", "calibrated_speedup", "theory_speedup", "best_k_calibrated", "tokens_per_s"):
        assert with_base[figure] == alone[figure], figure
    assert math.isnan(alone["speedup"]) and not math.isnan(with_base["speedup"])


def test_without_a_profile_the_step_is_estimated_and_says_so():
    alone = trace.summarize(ROUNDS)
    assert alone["step_source"].startswith("estimated")
    assert math.isclose(alone["c"], (0.03 / 12) / 0.1) and math.isclose(alone["v"], 1.0)
    with_plain = trace.summarize(ROUNDS + [rec(3, 0, 0, [5], verify_s=0.05)])
    assert with_plain["step_source"] == "this run's plain steps" and math.isclose(with_plain["v"], 2.0)


def test_greedy_comparison_names_the_first_difference_and_its_logit_gap():
    same = [rec(0, 2, 2, [1, 2, 3], margins=[3.0, 2.0, 4.0])]
    assert sametext.compare_outputs(same, same, "bf16")["equal"] is True
    base = [rec(i, 0, 0, [t], margins=[m]) for i, (t, m) in enumerate([(1, 3.0), (2, 0.125), (9, 1.0)])]
    spec = [rec(0, 2, 2, [1, 2, 3], margins=[3.0, 0.25, 4.0])]
    tie = sametext.compare_outputs(spec, base, "bf16")
    assert tie == {"equal": False, "position": 2, "gap_spec": 4.0, "gap_base": 1.0, "near_tie": False}
    base[2] = rec(2, 0, 0, [9], margins=[0.0625])
    tie = sametext.compare_outputs(spec, base, "bf16")
    assert tie["position"] == 2 and tie["near_tie"] is True and tie["gap_base"] == 0.0625
    assert sametext.compare_outputs(spec, base, "fp32")["near_tie"] is False  # fp32 rounds 2^16 times finer


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
    df = pd.read_csv(io.StringIO(tracefile.to_csv(ROUNDS)))
    assert len(df) == 3 and json.loads(df["new_tokens"][0]) == [0, 1, 2, 3, 99]
    cross = replace(ROUNDS[0], extras=CrossExtras(' a, "b"', [" a", ",", ' "b"'], [" a", ', "b"']))
    row = pd.read_csv(io.StringIO(tracefile.to_csv([cross]))).iloc[0]  # a cross-tokenizer round: both sides, as JSON
    assert json.loads(row["draft_pieces"]) == [" a", ",", ' "b"'] and json.loads(row["draft_source"]) == [" a", ', "b"']
    assert row["draft_text"] == ' a, "b"'
    doc = json.loads(tracefile.to_json(ROUNDS, pair="tiny", k=4))
    assert doc["pair"] == "tiny" and len(doc["rounds"]) == 3 and doc["summary"]["tokens"] == 8
    assert doc["summary"]["speedup"] is None  # NaN becomes null: the file is valid JSON


# ---------------------------------------------------------------- vLLM's names (docs/trace.md)

MIXED = [  # a theory-policy-like run: k varies, and round 1 is a plain target step (k = 0)
    rec(0, 3, 3, [0, 1, 2, 99], total=4),
    rec(1, 0, 0, [99], total=5),
    rec(2, 5, 1, [0, 99], total=7),
    rec(3, 3, 0, [99], total=8),
    rec(4, 3, 3, [0, 1, 2, 99], total=12, stop="length"),
]


def test_vllm_metrics_by_hand():
    m = trace.vllm_metrics(MIXED)
    # drafts are the rounds with k > 0: rounds 0, 2, 3, 4 (the plain target step of round 1 is no draft)
    assert m["num_drafts"] == m["num_spec_steps"] == 4
    assert m["num_draft_tokens"] == 3 + 5 + 3 + 3
    assert m["num_accepted_tokens"] == m["num_accepted_draft_tokens"] == 3 + 1 + 0 + 3
    # position i counts the drafts that accepted more than i tokens: 0 -> rounds 0, 2, 4; 1 and 2 -> rounds 0, 4
    assert m["num_accepted_tokens_per_pos"] == [3, 2, 2, 0, 0]
    assert m["num_spec_tokens"] == 5  # the longest draft (vLLM: the configured k)
    assert m["mean_acceptance_length"] == 1 + 7 / 4  # the bonus / correction token counted in
    assert m["draft_acceptance_rate"] == 7 / 14
    assert m["acceptance_histogram"] == {0: 1, 1: 1, 3: 2}  # drafts by accepted tokens; empty buckets left out
    assert m["per_step_accepted"] == [3, 1, 0, 3] and m["per_step_drafted"] == [3, 5, 3, 3]


def test_vllm_metrics_agree_with_the_summary():
    m, s = trace.vllm_metrics(ROUNDS), trace.summarize(ROUNDS)
    assert m["draft_acceptance_rate"] == s["alpha"] == 5 / 12
    assert m["mean_acceptance_length"] == 1 + s["mean_accepted"] == 1 + 5 / 3
    assert m["num_accepted_tokens_per_pos"] == [2, 1, 1, 1]  # rounds 0 and 1 kept position 0; only round 0 the rest


def test_a_run_without_drafts_has_no_vllm_rates():
    m = trace.vllm_metrics(BASELINE)
    assert (m["num_drafts"], m["num_draft_tokens"], m["num_accepted_tokens"]) == (0, 0, 0)
    assert m["num_accepted_tokens_per_pos"] == [] and m["acceptance_histogram"] == {} and m["per_step_drafted"] == []
    assert math.isnan(m["mean_acceptance_length"]) and math.isnan(m["draft_acceptance_rate"])


def test_json_trace_carries_the_vllm_names():
    doc = json.loads(tracefile.to_json(MIXED, BASELINE))
    assert doc["vllm"]["acceptance_histogram"] == {"0": 1, "1": 1, "3": 2}  # JSON keys are strings, as vLLM's
    assert doc["vllm"]["num_drafts"] == 4 and doc["vllm"]["mean_acceptance_length"] == 2.75
    assert json.loads(tracefile.to_json(BASELINE))["vllm"]["mean_acceptance_length"] is None  # nan -> null


def tree_rec(i, parents, accepted):
    """A tree round as tree.tree_record orders it: the kept path first (nodes 0 .. accepted - 1)."""
    k = len(parents)
    return RoundRecord(
        i,
        k,
        list(range(k)),
        accepted,
        99,
        "correction",
        [0] * accepted + [99],
        0.01,
        0.1,
        0,
        extras=TreeExtras(parents, list(range(accepted))),
    )


def test_depth_acceptance_reads_chains_by_position_and_trees_by_depth():
    assert trace.depth_acceptance(ROUNDS) == [2 / 3, 1 / 2, 1.0, 1.0]
    rounds = [
        tree_rec(0, [-1, 0, 1, -1, 0], 3),  # path 0 -> 1 -> 2 (depth 3), a leaf: nothing tried at depth 4
        tree_rec(1, [-1, 0, -1, -1, 1], 1),  # path 0; tried its child 1 at depth 2, rejected
        tree_rec(2, [-1, -1, 0, 1], 0),  # both depth-1 candidates rejected
        tree_rec(3, [-1, -1, 1, 2], 1),  # path 0, a leaf: depth 2 lies under node 1, never reached
    ]
    # depth 1: reached by all 4, kept by 3; depth 2: reached by rounds 0 and 1, kept by 0; depth 3: round 0
    assert trace.depth_acceptance(rounds) == [3 / 4, 1 / 2, 1.0]
    assert trace.depth_acceptance([]) == []


def test_batch_summary_by_hand():
    """A batched run's figures (playground.engine.batch rounds), defined as summarize's: two rows drafting k = 3 in round 0
    (kept 3 and 1), one row left in round 1 drafting k = 2 (kept 0), a plain round; 10 tokens in 2 s."""
    from types import SimpleNamespace as R

    rounds = [
        R(k=3, rows=[0, 1], accepted=[3, 1], draft_s=0.5, verify_s=0.5),
        R(k=2, rows=[1], accepted=[0], draft_s=0.25, verify_s=0.25),
        R(k=0, rows=[1], accepted=[0], draft_s=0.0, verify_s=0.5),
    ]
    s = trace.batch_summary(rounds, 10)
    assert s["seconds"] == 2.0 and s["tokens_per_s"] == 5.0
    assert s["alpha"] == 4 / 8 and s["mean_accepted"] == 4 / 3
    assert math.isnan(trace.batch_summary([], 0)["tokens_per_s"])


# An interleaved comparison, by hand: three segments; the machine is twice as slow in the last one (a job started),
# on both sides alike. Speculative: 5 tokens a round of k = 4; the target alone: 1 token a step.
FAST, SLOW = 1.0, 2.0


def _interleaved(loads=(FAST, FAST, SLOW)) -> tuple[list[RoundRecord], list[RoundRecord], list[tuple[int, int]]]:
    spec, base = [], []
    for load in loads:
        spec.append(
            rec(len(spec), 4, 4, [1, 2, 3, 4, 5], draft_s=0.04 * load, verify_s=0.1 * load, total=5 * len(spec) + 5)
        )
        for _ in range(5):
            base.append(rec(len(base), 0, 0, [7], draft_s=0.0, verify_s=0.05 * load, total=len(base) + 1))
    return spec, base, [(1, 5)] * len(loads)


def test_an_interleaved_comparison_takes_c_and_v_from_its_own_target_steps():
    spec, base, segments = _interleaved()
    s = trace.summarize(spec, base, PROFILE, segments)
    step = (0.05 * 9 + 0.1 * 5) / 14  # the target alone's steps after its first, both loads as they came
    assert s["step_source"] == trace.IN_RUN and math.isclose(s["step_s"], step)
    assert math.isclose(s["c"], (0.04 + 0.08) / 8 / step) and math.isclose(s["v"], (0.1 + 0.2) / 2 / step)
    own = trace.run_profile(spec, step, PROFILE)  # V(1) and V(5) from the run: none of the calibration's
    assert own.verify_s == {1: step, 5: own.verify_s[5]} and math.isclose(own.verify_s[5], 0.15)
    wider = trace.run_profile(spec, step, theory.CostProfile({1: 0.08, 5: 0.1, 9: 0.16}))
    assert math.isclose(wider.verify_s[9], 0.16 * step / 0.08)  # an n the run never scored: at this run's level
    assert math.isclose(
        s["calibrated_speedup"], theory.run_speedup(1.0, 4, s["c"], own, 15, spec[0].seconds)
    )  # alpha_eval = 1: every draft kept
    calibrated = trace.summarize(spec, base, PROFILE)  # the same rounds, not interleaved: the start-up's numbers
    assert calibrated["step_source"] == trace.CALIBRATION and calibrated["c"] != s["c"]
    assert calibrated["calibrated_speedup"] != s["calibrated_speedup"]
    assert calibrated["speedup"] == s["speedup"]  # measured the same way either way


def test_the_segments_spread_shows_a_change_of_load():
    spec, base, segments = _interleaved()
    s = trace.summarize(spec, base, None, segments)
    # each segment: 5 tokens in 0.14 * load s against 5 in 0.25 * load s: the same speedup under both loads
    assert s["segments"] == 3 and math.isclose(s["segment_speedup_min"], 0.25 / 0.14)
    assert math.isclose(s["segment_speedup_max"], 0.25 / 0.14)
    assert math.isclose(s["step_spread"], 1.0)  # the target alone's step: 0.05 s, then 0.1 s
    first_slow = _interleaved((SLOW, FAST, FAST))  # the first segment (its prompt passes) is left out
    assert trace.summarize(first_slow[0], first_slow[1], None, first_slow[2])["step_spread"] == 0.0
    two = _interleaved((FAST, FAST))  # one segment after the first: no spread to tell
    assert math.isnan(trace.summarize(two[0], two[1], None, two[2])["step_spread"])
    skewed = [replace(r, verify_s=0.3) if r.round == 1 else r for r in spec]  # one slow speculative segment
    low = trace.summarize(skewed, base, None, segments)
    assert math.isclose(low["segment_speedup_min"], 0.25 / 0.34) and low["segment_speedup_max"] > 1.7
    assert trace.summarize(spec, base)["segments"] == 0 and math.isnan(trace.summarize(spec)["step_spread"])


def test_split_segments_gives_each_side_its_rounds_in_order():
    spec, base, segments = _interleaved()
    parts = trace.split_segments(spec, base, segments)
    assert [(len(a), len(b)) for a, b in parts] == segments
    assert [r for a, _ in parts for r in a] == spec and [r for _, b in parts for r in b] == base


def test_segments_run_under_load_are_counted_apart_from_the_speedup():
    """A hog in the last segment: the speculative side slows 1.2x there, the target alone 2x (one thread of two).
    The shown speedup counts the hogged tokens at each side's quiet pace; step and c are the quiet segments'; the
    hogged segment is counted apart."""
    spec, base, segments = _interleaved((FAST,) * 4)
    hogged = lambda r, slow: replace(r, draft_s=r.draft_s * slow, verify_s=r.verify_s * slow, load=1.0)
    spec[3], base[15:] = hogged(spec[3], 1.2), [hogged(r, 2.0) for r in base[15:]]
    spec[0] = replace(spec[0], verify_s=0.3, load=LOADED - 0.01)  # the prompt's pass; a browser's bit: not load
    base[0] = replace(base[0], verify_s=0.25)  # the target alone's prompt pass
    base[6] = replace(base[6], load=2.0)  # a burst in one short step of a segment: not a loaded segment
    s = trace.summarize(spec, base, PROFILE, segments)
    quiet = (20 / (0.62 + 5 * 0.028)) / (20 / (0.95 + 5 * 0.05))  # the hogged tokens at each side's quiet pace
    assert math.isclose(s["speedup"], quiet) and s["loaded_segments"] == 1
    assert not math.isclose(quiet, 0.95 / 0.62)  # not the quiet segments' own ratio: their prompt passes weigh more
    assert math.isclose(s["speedup_loaded"], (5 / (0.14 * 1.2)) / (5 / 0.5))
    assert math.isclose(s["speedup_all"], (20 / (0.62 + 0.14 * 1.2)) / (20 / 1.45)) and s["speedup_all"] > quiet
    assert math.isclose(s["step_s"], 0.05)  # the quiet rounds' after the first
    assert math.isclose(s["c"], 0.04 / 4 / 0.05)
    assert s["tokens"] == 20 and math.isclose(s["tokens_per_s"], 20 / (0.62 + 0.14 * 1.2))  # the whole run's output
    spec[1:3], base[5:15] = [hogged(r, 1.0) for r in spec[1:3]], [hogged(r, 1.0) for r in base[5:15]]
    too_few = trace.summarize(spec, base, PROFILE, segments)  # no quiet segment after the first: the whole run
    assert too_few["loaded_segments"] == 0 and too_few["speedup"] == too_few["speedup_all"]
    everywhere = [replace(r, load=1.0) for r in spec], [replace(r, load=1.0) for r in base]
    all_loaded = trace.summarize(*everywhere, PROFILE, segments)  # no quiet segment to take: the whole run
    assert all_loaded["loaded_segments"] == 0 and all_loaded["speedup"] == all_loaded["speedup_all"]
    assert math.isnan(all_loaded["speedup_loaded"])
    assert trace.summarize(spec, base, PROFILE)["loaded_segments"] == 0  # not interleaved: no segments to tell
