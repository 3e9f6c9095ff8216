"""Staged drafting (playground/decoding/staged.py): prompt lookup drafts for the draft model, the draft model keeps
what it would have drafted itself, the target verifies as for the draft model alone. Lossless greedy and
sampling, both levels in the records, and fewer draft passes where prompt lookup proposes well."""

from __future__ import annotations

import copy

import pytest
import torch

from playground.decoding import make_drafter
from playground.decoding.lookup import lookup
from playground.decoding.model import ModelDrafter
from playground.decoding.staged import StagedDrafter
from playground.core.errors import PlaygroundError
from playground.core.records import StagedExtras
from playground.run.runner import encode_prompt
from playground.engine.sampling import logits_to_probs
from playground.core.config import DecodeConfig, DrafterKind
from playground.run.spec import DrafterSpec, PairSpec, RunSpec, parse_drafter_name
from tests.helpers import CHI2_999, PROMPTS, decode, fit, target_greedy, two_token_test

REPETITIVE = (
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. "
    "The quick brown fox jumps over the lazy dog. The quick"
)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_staged_output_equals_target_generate(tiny_pair, k):
    for i, prompt in enumerate(PROMPTS + [REPETITIVE]):
        ids = encode_prompt(tiny_pair.tokenizer, prompt)
        max_new = [1, 2, 7, 40][i % 4]  # 1 and 2 leave less budget than k
        dec, rounds = decode(
            tiny_pair, make_drafter(DrafterSpec(DrafterKind.STAGED), tiny_pair), ids, max_new_tokens=max_new, k=k
        )
        assert dec.new_tokens == target_greedy(tiny_pair.target, ids, max_new, tiny_pair.eos), (prompt, k)
        for r in rounds:
            assert 0 <= r.extras.accepted <= r.extras.proposed and r.extras.passes <= r.k


def _passes(model, run) -> int:
    """How many forward passes of `model` run() makes (a counter around the real forward)."""
    real, calls = model.forward, []

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    model.forward = counted
    try:
        run()
    finally:
        del model.forward
    return len(calls)


@pytest.fixture(scope="module")
def bigram_draft(tiny_pair):
    """The tiny draft with its attention outputs zeroed: each position sees only its own token, a bigram
    model, whose greedy text runs into a cycle (a repetitive text, as the tiny random models' is not)."""
    draft = copy.deepcopy(tiny_pair.draft)
    with torch.no_grad():
        for layer in draft.model.layers:
            layer.self_attn.o_proj.weight.zero_()
    return draft


def test_staged_drafting_runs_the_draft_model_less_when_prompt_lookup_proposes_well(tiny_pair, bigram_draft):
    ids = cycle_prompt(tiny_pair.tokenizer, bigram_draft)
    out = {}

    def run(drafter):
        out[drafter.name] = decode(tiny_pair, drafter, ids, max_new_tokens=48, k=6)

    plain = _passes(bigram_draft, lambda: run(ModelDrafter(bigram_draft)))
    staged = _passes(bigram_draft, lambda: run(StagedDrafter(bigram_draft)))
    (plain_dec, plain_rounds), (staged_dec, staged_rounds) = out["draft model"], out[DrafterKind.STAGED.value]
    assert staged_dec.new_tokens == plain_dec.new_tokens  # the same drafts, so the same output
    assert [r.draft_tokens for r in staged_rounds] == [r.draft_tokens for r in plain_rounds]
    assert plain == sum(r.k for r in plain_rounds)  # one pass per drafted token
    kept = sum(r.extras.accepted for r in staged_rounds)
    assert sum(r.extras.passes for r in staged_rounds) == staged
    # each kept lookup token saves the pass that would have drafted it (but the one that ends a draft: no bonus)
    assert plain - kept <= staged <= plain - kept + len(staged_rounds)
    assert kept > 0 and staged < plain, (kept, staged, plain)


def cycle_prompt(tokenizer, draft) -> torch.Tensor:
    """A repetitive prompt: the bigram draft's own greedy text, where prompt lookup proposes its top tokens."""
    start = encode_prompt(tokenizer, "Once upon a time")
    return draft.generate(start, do_sample=False, max_new_tokens=40, pad_token_id=0)


def test_staged_draft_tokens_are_draws_from_the_draft_distribution(tiny_pair, bigram_draft):
    """The first level alone: with prompt lookup proposing, the first drafted token of many seeded drafts
    follows the draft's own p there, as ModelDrafter's would; a rule that keeps every proposal fails."""
    ids = cycle_prompt(tiny_pair.tokenizer, bigram_draft)
    params = DecodeConfig(temperature=1.5, top_k=4).sampling
    with torch.inference_mode():
        p = logits_to_probs(bigram_draft(input_ids=ids).logits[0, -1], params)
    drafter = StagedDrafter(bigram_draft)
    firsts, kept = [], 0
    for seed in range(3000):
        drafter.reset()
        draft = drafter.propose(ids, 2, params, torch.Generator().manual_seed(seed))
        firsts.append(int(draft.tokens[0]))
        kept += drafter.kept
        assert drafter.proposed > 0
    stat, critical = fit(torch.tensor(firsts), p)
    assert stat < critical, (stat, critical)
    assert 0 < kept < 3000 * 2  # the proposals were kept and rejected
    always = torch.full((3000,), lookup(ids[0].tolist(), 1)[0])  # a broken first level: the proposal, always
    assert fit(always, p)[0] > critical


def test_engine_staged_two_token_distribution_equals_target(tiny_pair, bigram_draft):
    """End to end through the real loop: the joint law of the first two tokens over 1,500 seeds equals the
    target's (temperature 1.5, top-k 4), with prompt lookup proposing at the first level."""
    ids = cycle_prompt(tiny_pair.tokenizer, bigram_draft)
    first_level = StagedExtras()

    def count(seed, r):
        first_level.proposed += r.extras.proposed
        first_level.accepted += r.extras.accepted

    stat, df = two_token_test(
        tiny_pair,
        lambda: StagedDrafter(bigram_draft),
        ids,
        1500,
        count,
        max_new_tokens=2,
        k=2,
        temperature=1.5,
        top_k=4,
    )
    assert stat < CHI2_999[df], (stat, df)
    assert 0 < first_level.accepted < first_level.proposed  # the first level kept and rejected lookup tokens


def test_staged_is_a_drafter_of_the_spec(tiny_models):
    assert parse_drafter_name("staged") == DrafterSpec(DrafterKind.STAGED)
    assert parse_drafter_name(DrafterKind.STAGED.value + ":int8") == DrafterSpec.of(
        DrafterKind.STAGED, precision="int8"
    )
    spec = DrafterSpec(DrafterKind.STAGED)
    assert spec.needs_draft_model and spec.same_tokenizer
    with pytest.raises(PlaygroundError, match="needs a pair with a draft model"):
        RunSpec(PairSpec("p", str(tiny_models["target"])), spec, prompt="x")
    with pytest.raises(PlaygroundError, match="drafts a chain only"):
        RunSpec(PairSpec("p", "t", "d"), spec, DecodeConfig(tree="2-2"), prompt="x")
