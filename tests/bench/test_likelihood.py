"""The sampled rows' check (bench.likelihood) on the tiny pair: the target's NLL of an output, computed in one
pass, equals the same computed one position at a time; our sampled rows score like the target alone's and are not
flagged, a row of tokens the target would not draw (what vLLM 0.32's CPU build emitted when it speculated at
T = 0.7, docs/vllm.md) is flagged; the report says both."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
import torch

from playground.bench import decode_grid, likelihood, run_grid
from playground.trace.results import Result
from playground.run.runner import Runner, encode_prompt
from playground.core.config import DecodeConfig, DrafterKind
from playground.run.spec import DrafterSpec, PairSpec, RunSpec
from tests.helpers import load_pair

PROMPTS = {"code": "def fibonacci(n):", "story": "Once upon a time"}
T = 0.1  # the tiny random models' logits are close together: a low temperature makes their distribution peaked


@pytest.fixture(scope="module")
def pair(tiny_models) -> PairSpec:
    return PairSpec("tiny (test)", str(tiny_models["target"]), str(tiny_models["draft"]))


@pytest.fixture(scope="module")
def scored(pair):
    runner = Runner()
    results = run_grid(
        runner, [pair], PROMPTS, decode_grid([3], [0.0, T], max_new_tokens=24), [DrafterSpec(DrafterKind.DRAFT_MODEL)]
    )
    sampled = next(r for r in results if r.temperature == T and r.drafter == DrafterKind.DRAFT_MODEL.value)
    rng = random.Random(0)
    vocab = load_pair(runner, RunSpec(pair, DrafterSpec(), DecodeConfig(), "x")).target.config.vocab_size
    broken = replace(
        sampled,
        method="a broken sampler",
        engine="vllm",
        new_tokens=[rng.randrange(vocab) for _ in sampled.new_tokens],
        counters={},
    )
    results.append(broken)
    likelihood.score(runner, results, [pair], PROMPTS)
    return runner, results, broken


def test_one_pass_equals_scoring_one_position_at_a_time(pair, scored):
    runner, results, _ = scored
    row = next(r for r in results if r.temperature == T and r.engine == "ours" and r.new_tokens)
    loaded = load_pair(
        runner, RunSpec(pair, DrafterSpec(DrafterKind.TARGET_ALONE), DecodeConfig(), PROMPTS[row.category])
    )
    ids = encode_prompt(loaded.tokenizer, PROMPTS[row.category])
    total = 0.0
    with torch.no_grad():
        for i, token in enumerate(row.new_tokens):
            prefix = torch.cat([ids, torch.tensor([row.new_tokens[:i]], dtype=torch.long)], dim=1)
            logits = loaded.target(input_ids=prefix).logits[0, -1].float()
            total -= float(torch.log_softmax(logits / T, dim=-1)[token])
    assert row.target_nll == pytest.approx(total / len(row.new_tokens), rel=1e-4, abs=1e-4)


def test_our_sampled_rows_pass_and_a_broken_samplers_row_is_flagged(scored):
    _, results, broken = scored
    ours = [r for r in results if r.temperature == T and r.engine == "ours"]
    assert ours and all(r.off_distribution is False for r in ours)
    alone = next(r for r in ours if r.drafter == DrafterKind.TARGET_ALONE.value and r.category == broken.category)
    assert broken.off_distribution is True and broken.target_nll > alone.target_nll + likelihood.NLL_MARGIN
    assert all(math.isnan(r.target_nll) and r.off_distribution is None for r in results if r.temperature == 0)
    table = likelihood.distribution_table(results)
    assert "| vllm | a broken sampler | 3 | 0.1 | 1 |" in table and table.rstrip().endswith("| 1 of 1 |")
    assert "| ours | draft model | 3 | 0.1 | 2 |" in table and "| 0 of 2 |" in table
