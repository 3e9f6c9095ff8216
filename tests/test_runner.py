"""The runner: the one way anything decodes (load, warm-up once, cost profile, rounds)."""

from __future__ import annotations

import torch

from tests.helpers import load_pair, profile, run_all, warmed
from playground.trace import sametext
from playground import trace
from playground.run.runner import Runner, encode_prompt, new_tokens
from playground.core.config import DecodeConfig, DrafterKind, KPolicy, Precision
from playground.run.spec import DrafterSpec, PairSpec, RunSpec


def target_greedy(pair, prompt: str, n: int) -> list[int]:
    ids = encode_prompt(pair.tokenizer, prompt)
    with torch.inference_mode():
        out = pair.target.generate(
            ids, do_sample=False, max_new_tokens=n, eos_token_id=sorted(pair.eos), pad_token_id=0
        )
    return out[0, ids.shape[1] :].tolist()


def test_run_equals_target_generate_for_every_drafter_and_policy(runner, tiny_spec):
    for kind in (DrafterKind.DRAFT_MODEL, DrafterKind.PROMPT_LOOKUP, DrafterKind.EARLY_EXIT):
        for policy in KPolicy:
            spec = tiny_spec("The quick brown fox", kind, max_new_tokens=30, k=3, policy=policy)
            pair = load_pair(runner, spec)
            assert new_tokens(run_all(runner, spec)) == target_greedy(pair, spec.prompt, 30), (kind, policy)


def test_warm_up_happens_once_per_target_and_drafter(tiny_spec, monkeypatch):
    runner = Runner()
    spec = tiny_spec(max_new_tokens=5)
    run_all(runner, spec)
    assert warmed(runner, spec)
    calls = []
    monkeypatch.setattr(runner, "_warm_up", lambda *a, **k: calls.append(a))
    run_all(runner, spec)
    run_all(runner, spec.baseline())
    assert calls == []
    lookup = tiny_spec(drafter=DrafterKind.PROMPT_LOOKUP, max_new_tokens=5)
    assert not warmed(runner, lookup)  # a new drafter on the same target is cold


def test_cost_profile_has_one_positive_value_per_measured_n(runner, tiny_spec):
    spec = tiny_spec(max_new_tokens=5)
    run_all(runner, spec)
    costs = profile(runner, spec)
    assert sorted(costs.verify_s) == [1, 2, 3, 5, 9, 17]
    assert all(s > 0 and s == s for s in costs.verify_s.values())
    assert costs.draft_s > 0  # the draft model costs something per token


def test_theory_policy_with_a_fixed_profile_is_reproducible_for_a_seed(runner, tiny_spec):
    spec = tiny_spec("Once upon a time", max_new_tokens=40, k=4, policy=KPolicy.THEORY, temperature=1.0, seed=11)
    first = run_all(runner, spec)
    second = run_all(runner, spec)
    assert new_tokens(first) == new_tokens(second)
    assert [r.k for r in first] == [r.k for r in second]


def test_baseline_runs_at_the_same_target_precision(runner, tiny_models):
    pair = PairSpec("tiny", str(tiny_models["target"]), str(tiny_models["draft"]), target_precision="bf16")
    spec = RunSpec(
        pair,
        DrafterSpec.of(precision="bf16"),
        DecodeConfig(max_new_tokens=24, k=4, policy=KPolicy.FIXED),
        "Once upon a time",
    )
    loaded = load_pair(runner, spec)
    assert loaded.target.dtype == torch.bfloat16 and loaded.draft.dtype == torch.bfloat16
    assert load_pair(runner, spec.baseline()).target is loaded.target  # the same bf16 model object
    rounds, base = run_all(runner, spec), run_all(runner, spec.baseline())
    verdict = sametext.compare_outputs(rounds, base, Precision.BF16.value)
    # the promise in low precision: identical, or a flip at a near-tie that the comparison names
    assert verdict["equal"] or verdict["near_tie"], verdict


def test_figures_are_the_same_with_and_without_a_baseline(runner, tiny_spec):
    spec = tiny_spec(max_new_tokens=30, k=4)
    rounds = run_all(runner, spec)
    costs = profile(runner, spec)
    alone = trace.summarize(rounds, None, costs)
    compared = trace.summarize(rounds, run_all(runner, spec.baseline()), costs)
    assert (alone["c"], alone["calibrated_speedup"], alone["best_k_calibrated"]) == (
        compared["c"],
        compared["calibrated_speedup"],
        compared["best_k_calibrated"],
    )
    assert alone["step_source"] == trace.CALIBRATION  # a baseline run apart from it (no segments) changes nothing


def test_compare_interleaves_both_sides_and_changes_no_decision(runner, tiny_spec):
    """Session.compare alternates segments of the speculative run and the target alone, each on its own decoder:
    every round is the round a run of its own gives, greedy output is the target's, and the target alone catches
    up to the speculative side's length at the end of each segment."""
    spec = tiny_spec("The quick brown fox", max_new_tokens=40, k=3)
    with runner.session(spec) as session:
        events = list(session.compare(segment_tokens=6))
        segments = session.segments
        alone, base_alone = list(session.rounds()), list(session.rounds(spec.baseline()))
    rounds = [r for baseline, r in events if not baseline]
    base = [r for baseline, r in events if baseline]
    assert new_tokens(rounds) == new_tokens(base) == target_greedy(load_pair(runner, spec), spec.prompt, 40)
    assert [(r.k, r.accepted, r.new_tokens) for r in rounds] == [(r.k, r.accepted, r.new_tokens) for r in alone]
    assert [r.new_tokens for r in base] == [r.new_tokens for r in base_alone]
    assert sum(n for n, _ in segments) == len(rounds) and sum(m for _, m in segments) == len(base)
    sides = [baseline for baseline, _ in events]
    switches = sum(a != b for a, b in zip(sides, sides[1:]))
    assert len(segments) >= 4 and switches == 2 * len(segments) - 1  # spec, base, spec, base, ...: no side twice
    i = j = 0
    for n, m in segments:  # after each segment both sides stand at the same output length
        i, j = i + n, j + m
        assert rounds[i - 1].total_new == base[j - 1].total_new
        assert n == 1 or rounds[i - 2].total_new - (rounds[i - n - 1].total_new if i > n else 0) < 6


def test_an_interleaved_run_measures_its_own_c_and_v(runner, tiny_spec):
    """With the segments, c and v come from the target alone's steps in the same run, not from the calibration."""
    spec = tiny_spec(max_new_tokens=30, k=4)
    with runner.session(spec) as session:
        events = list(session.compare())
        costs = session.profile()
        segments = session.segments
    rounds = [r for baseline, r in events if not baseline]
    base = [r for baseline, r in events if baseline]
    s = trace.summarize(rounds, base, costs, segments)
    steps = [r.verify_s for r in base[1:]]
    assert s["step_source"] == trace.IN_RUN and s["step_s"] == sum(steps) / len(steps) != costs.step_s
    later = [r for r in rounds[1:] if r.k]
    assert s["c"] == (sum(r.draft_s for r in later) / sum(r.k for r in later)) / s["step_s"]
    assert s["segments"] == len(segments) and s["segment_speedup_min"] <= s["segment_speedup_max"]
    apart = trace.summarize(rounds, base, costs)  # the same rounds without their segments: the calibration's
    assert apart["step_source"] == trace.CALIBRATION and apart["c"] != s["c"] and apart["segments"] == 0
