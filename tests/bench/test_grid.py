"""The benchmark grid on the tiny pair, through the Runner: one baseline per prompt and sampling setting,
greedy rows equal to it, the HF peer on the very same models leaving the draft's settings as it found
them, vs_best_hf against the best HF configuration, and the cap counted over the whole request.
Speed itself is never asserted."""

from __future__ import annotations

import math

import pytest

from playground import models
from playground.bench import MAX_CELLS, Result, decode_grid, grid_frame, hf, run_grid, vs_best_hf
from playground.bench.grid import count_cells
from playground.core.errors import PlaygroundError
from playground.run.runner import Runner
from playground.core.config import DecodeConfig, DrafterKind, KPolicy
from playground.run.spec import DrafterSpec, PairSpec, RunSpec
from tests.helpers import load_pair

PROMPTS = {"code": "def fibonacci(n):", "story": "Once upon a time"}


class CountingRunner(Runner):
    """A real Runner that also counts the runs it is asked for, by drafter kind (warm-ups excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, float]] = []

    def _decoder(self, spec, pair, *args, **kwargs):  # what a session's rounds decode with (a warm-up's: _build)
        self.calls.append((spec.drafter.kind.value, spec.prompt, spec.decode.temperature))
        return super()._decoder(spec, pair, *args, **kwargs)


@pytest.fixture(scope="module")
def pair(tiny_models) -> PairSpec:
    return PairSpec("tiny (test)", str(tiny_models["target"]), str(tiny_models["draft"]))


@pytest.fixture(scope="module")
def grid(pair):
    runner = CountingRunner()
    drafters = [DrafterSpec(DrafterKind.DRAFT_MODEL), DrafterSpec(DrafterKind.PROMPT_LOOKUP)]
    results = run_grid(
        runner,
        [pair],
        PROMPTS,
        decode_grid(["3", "adaptive"], [0.0, 1.0], max_new_tokens=10),
        drafters,
        compare_hf=True,
    )
    return runner, results


def test_the_target_alone_runs_once_per_prompt_and_temperature(grid):
    runner, results = grid
    baselines = [c for c in runner.calls if c[0] == DrafterKind.TARGET_ALONE.value]
    assert sorted(baselines) == sorted(
        (DrafterKind.TARGET_ALONE.value, p, t) for p in PROMPTS.values() for t in (0.0, 1.0)
    )
    ours = [c for c in runner.calls if c[0] != DrafterKind.TARGET_ALONE.value]
    assert len(ours) == len(PROMPTS) * 2 * 2 * 2  # prompts x temperatures x k values x drafters
    rows = [r for r in results if r.method == "target alone"]
    assert len(rows) == 4 and all(r.speedup == 1.0 and r.engine == "ours" for r in rows)


def test_greedy_rows_of_ours_and_hf_equal_the_target_alone(grid):
    _, results = grid
    base = {r.category: r.new_tokens for r in results if r.method == "target alone" and r.temperature == 0}
    greedy = [r for r in results if r.temperature == 0 and r.method != "target alone"]
    assert {r.engine for r in greedy} == {"ours", "hf"}
    for r in greedy:
        assert r.greedy_equal is True and r.new_tokens == base[r.category], (r.method, r.k)
    assert all(r.greedy_equal is None for r in results if r.temperature > 0)


def test_every_row_has_its_figures_and_precisions(grid):
    _, results = grid
    ours = [r for r in results if r.engine == "ours" and r.drafter == "draft model"]
    assert ours and all(r.tokens_per_s > 0 and r.speedup > 0 for r in ours)
    assert all(
        r.tokens == 10 for r in ours if r.temperature == 0
    )  # greedy: the budget (this tiny pair's argmax is never EOS)
    assert all(1 <= r.tokens <= 10 for r in ours)  # sampling may draw EOS before the budget
    assert all(0 <= r.alpha <= 1 and r.c > 0 and not math.isnan(r.calibrated_speedup) for r in ours)
    assert {r.target_precision for r in results} == {"fp32"}
    assert all(r.draft_precision for r in ours)  # the precision the draft was loaded at
    drafted = {r.draft_precision for r in results if r.method in (hf.HF_SAME_DRAFT, hf.HF_DEFAULTS)}
    assert drafted == {r.draft_precision for r in ours} == {models.default_draft_precision().value}  # the default's
    assert all(r.draft_precision == "" for r in results if r.drafter in ("prompt lookup", "target alone"))
    methods = {r.method for r in results if r.engine == "hf"}
    assert methods == {hf.HF_TARGET_ALONE, hf.HF_SAME_DRAFT, hf.HF_DEFAULTS, hf.HF_PROMPT_LOOKUP}
    same = {r.k for r in results if r.method == hf.HF_SAME_DRAFT}
    assert same == {"3", "heuristic"}  # constant k = 3, and transformers' schedule for our heuristic policy


def test_the_frame_has_the_columns_the_views_read(grid):
    _, results = grid
    df = grid_frame(results)
    assert len(df) == len(results)
    for column in (
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
        "calibrated_speedup",
        "vs_best_hf",
        "target_precision",
        "draft_precision",
        "greedy_ok",
    ):
        assert column in df.columns
    assert "new_tokens" not in df.columns
    assert df.loc[df["engine"] == "ours", "vs_best_hf"].notna().all()
    assert df.loc[df["engine"] == "hf", "vs_best_hf"].isna().all()


def test_hf_peer_restores_the_drafts_generation_config(tiny_models, pair):
    runner = Runner()
    spec = RunSpec(pair, DrafterSpec(DrafterKind.DRAFT_MODEL), DecodeConfig(max_new_tokens=8, k=2), "Once upon a time")
    loaded = load_pair(runner, spec)
    config = loaded.draft.generation_config
    before = {
        "num_assistant_tokens": 7,
        "num_assistant_tokens_schedule": "heuristic_transient",
        "assistant_confidence_threshold": 0.33,
    }
    saved = {name: getattr(config, name) for name in before}
    try:
        for name, value in before.items():
            setattr(config, name, value)
        # the heuristic schedule writes its final num_assistant_tokens back into the draft's config
        heuristic, defaults = hf.configs_for(spec.drafter, DecodeConfig(k=2, policy=KPolicy.HEURISTIC))
        for c in (heuristic, defaults, hf.configs_for(spec.drafter, DecodeConfig(k=3, policy=KPolicy.FIXED))[0]):
            tokens, seconds = hf.generate(loaded, c, spec.prompt, spec.decode)
            assert len(tokens) == 8 and seconds > 0
            assert {name: getattr(config, name) for name in before} == before
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


def test_hf_assisted_runs_with_the_same_draft_object(pair):
    runner = Runner()
    spec = RunSpec(pair, DrafterSpec(DrafterKind.DRAFT_MODEL), DecodeConfig(max_new_tokens=6), "Once upon a time")
    loaded = load_pair(runner, spec)
    seen = []
    real = loaded.draft.forward

    def spy(*args, **kwargs):  # the draft object our engine drafts with is the one generate calls
        seen.append(1)
        return real(*args, **kwargs)

    loaded.draft.forward = spy
    try:
        hf.generate(loaded, hf.configs_for(spec.drafter, spec.decode)[0], spec.prompt, spec.decode)  # the same draft
    finally:
        del loaded.draft.forward
    assert seen


def test_the_cap_counts_the_whole_request_before_anything_runs(pair):
    runner = CountingRunner()
    pairs = [PairSpec(f"p{i}", pair.target, pair.draft) for i in range(70)]
    with pytest.raises(PlaygroundError, match=r"needs 140 runs.*and 70 of the target alone.*limit is 64"):
        run_grid(runner, pairs, {"a": "x"}, [DecodeConfig()], [DrafterSpec()])
    # 4 pairs x 2 prompts x 3 k x 3 temperatures x 1 drafter = 72, and 4 x 2 x 3 baselines: each factor alone is small
    decodes = decode_grid(["1", "2", "3"], [0, 0.5, 1])
    with pytest.raises(PlaygroundError, match="needs 96 runs"):
        run_grid(runner, pairs[:4], PROMPTS, decodes, [DrafterSpec()])
    assert runner.calls == [] and MAX_CELLS == 64


def test_the_cap_counts_the_target_alone_baselines(pair):
    """Issue 29.7: 64 temperatures passed the 64-run cap and ran 128 times (each with its target-alone baseline)."""
    runner = CountingRunner()
    temps = [i / 32 for i in range(64)]
    with pytest.raises(PlaygroundError, match=r"needs 128 runs.*and 64 of the target alone.*limit is 64"):
        run_grid(
            runner, [PairSpec("p", pair.target, pair.draft)], {"a": "x"}, decode_grid(["4"], temps), [DrafterSpec()]
        )
    assert runner.calls == []
    assert count_cells([pair], {"a": "x"}, decode_grid(["4"], temps[:32]), [DrafterSpec()]) == 64  # 32 + 32: allowed


def test_a_bad_spec_is_refused_before_anything_runs(pair):
    runner = CountingRunner()
    no_draft = PairSpec("no draft", pair.target)
    with pytest.raises(PlaygroundError, match="needs a pair with a draft model"):
        run_grid(runner, [pair, no_draft], {"a": "x"}, [DecodeConfig()], [DrafterSpec()])
    with pytest.raises(PlaygroundError, match="prompt is empty"):
        run_grid(runner, [pair], {"a": "x", "b": "  "}, [DecodeConfig()], [DrafterSpec()])
    assert runner.calls == []


def test_decode_grid_reads_k_with_the_spec_parser():
    decodes = decode_grid(["4", "adaptive", "theory", (2, KPolicy.FIXED)], [0.0, 0.7], max_new_tokens=5)
    start = DecodeConfig().k  # a policy's name alone starts at the default k
    assert [(d.k, d.policy, d.temperature) for d in decodes[:4]] == [
        (4, KPolicy.FIXED, 0.0),
        (start, KPolicy.HEURISTIC, 0.0),
        (start, KPolicy.THEORY, 0.0),
        (2, KPolicy.FIXED, 0.0),
    ]
    assert len(decodes) == 8
    with pytest.raises(PlaygroundError, match="--k takes"):
        decode_grid(["0"], [0.0])


def _row(category, method, tps, engine="hf", temperature=0.0, pair="p"):
    return Result(
        pair=pair,
        category=category,
        method=method,
        drafter="draft model",
        engine=engine,
        k="4",
        temperature=temperature,
        target_precision="bf16",
        draft_precision="bf16",
        tokens=10,
        seconds=10 / tps,
        tokens_per_s=tps,
        wall_s=10 / tps,
    )


def test_vs_best_hf_divides_by_the_best_hf_speculative_config_of_the_same_prompt_and_temperature():
    rows = [
        _row("code", "draft model", 30.0, engine="ours"),
        _row("code", hf.HF_SAME_DRAFT, 20.0),
        _row("code", hf.HF_DEFAULTS, 25.0),  # the best HF configuration on code
        _row("code", hf.HF_TARGET_ALONE, 40.0),  # not speculative: never the reference
        _row("code", hf.HF_SAME_DRAFT, 50.0, temperature=1.0),  # another temperature
        _row("code", hf.HF_SAME_DRAFT, 60.0, pair="other"),  # another pair
        _row("story", "draft model", 12.0, engine="ours"),
        _row("story", hf.HF_PROMPT_LOOKUP, 8.0),
        _row("qa", "draft model", 12.0, engine="ours"),  # no HF run on qa
    ]
    ratios = vs_best_hf(rows)
    assert ratios[0] == pytest.approx(30 / 25)
    assert ratios[6] == pytest.approx(12 / 8)
    assert math.isnan(ratios[8])
    assert all(math.isnan(r) for r, row in zip(ratios, rows) if row.engine == "hf")


def test_decode_grid_adds_token_trees_next_to_the_k_values():
    decodes = decode_grid(["4", "confidence"], [0.0, 1.0], trees=["3-2-1-1", "dynamic:12"], confidence=0.3)
    assert [d.k_label for d in decodes[:4]] == ["4", "confidence", "tree 3-2-1-1", "tree dynamic:12"]
    assert len(decodes) == 8 and all(d.confidence == 0.3 for d in decodes)
    with pytest.raises(PlaygroundError, match="tree: write children per depth"):
        decode_grid(["4"], [0.0], trees=["3-x"])


def test_tree_configs_run_with_the_draft_model_and_equal_the_target_alone(pair):
    runner = CountingRunner()
    decodes = decode_grid(["2"], [0.0], max_new_tokens=10, trees=["2-1", "dynamic:4"])
    results = run_grid(
        runner,
        [pair],
        {"story": "Once upon a time"},
        decodes,
        [DrafterSpec(DrafterKind.PROMPT_LOOKUP)],
        compare_hf=True,
    )
    trees = [r for r in results if r.tree]
    assert sorted(r.k for r in trees) == ["tree 2-1", "tree dynamic:4"]
    assert {r.drafter for r in trees} == {DrafterKind.DRAFT_MODEL.value}  # prompt lookup drafts no tree
    base = next(r for r in results if r.method == "target alone")
    for r in trees:
        assert r.greedy_equal is True and r.new_tokens == base.new_tokens
        assert 1 <= r.nodes <= 4 and r.mean_accepted <= (2 if r.tree == "2-1" else 4)  # 2-1: 2 + 2 nodes, 2 deep
        assert r.depth_acceptance and all(0 <= a <= 1 for a in r.depth_acceptance if a == a)
    chain = next(r for r in results if r.engine == "ours" and r.k == "2")
    assert chain.tree == "" and chain.nodes == 2 and len(chain.depth_acceptance) == 2
    assert {r.method for r in results if r.engine == "hf"} == {
        hf.HF_TARGET_ALONE,
        hf.HF_PROMPT_LOOKUP,
    }  # HF has no trees
    frame = grid_frame(results)
    assert {"tree", "nodes"} <= set(frame.columns) and "depth_acceptance" not in frame.columns
    assert len(runner.calls) == 4  # the baseline, the chain, the two trees


def test_the_confidence_policys_hf_peer_is_assisted_generation_with_the_same_threshold(pair):
    runner = Runner()
    decodes = decode_grid(["confidence"], [0.0], max_new_tokens=10, confidence=0.5)
    results = run_grid(runner, [pair], {"story": "Once upon a time"}, decodes, [DrafterSpec()], compare_hf=True)
    peer = next(r for r in results if r.method == hf.HF_CONFIDENCE)
    assert peer.k == "confidence" and peer.greedy_equal is True
    loaded = load_pair(runner, RunSpec(pair, DrafterSpec(), decodes[0], "Once upon a time"))
    seen, real = [], loaded.draft.forward
    before = loaded.draft.generation_config.assistant_confidence_threshold

    def spy(*args, **kwargs):  # what the draft's generation_config says while HF drafts with it
        seen.append(loaded.draft.generation_config.assistant_confidence_threshold)
        return real(*args, **kwargs)

    loaded.draft.forward = spy
    try:
        hf.generate(loaded, hf.configs_for(DrafterSpec(), decodes[0], "fp32")[0], "Once upon a time", decodes[0])
    finally:
        del loaded.draft.forward
    assert seen and set(seen) == {0.5}
    assert loaded.draft.generation_config.assistant_confidence_threshold == before  # put back afterwards
