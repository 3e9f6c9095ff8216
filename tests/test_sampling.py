"""The acceptance rule keeps the target's distribution (Leviathan et al. 2023, Chen et al. 2023).

Statistical tests: chi-square goodness of fit at significance 1e-3 against the exact target
distribution. Each test also runs a deliberately wrong rule through the same statistic, to show
the sample is large enough to catch one.
"""

from __future__ import annotations

import pytest
import torch

from playground.decoding import make_drafter
from playground.run.runner import encode_prompt
from playground.core.config import SamplingParams
from playground.engine.acceptance import chain_sampling, residual
from playground.core.draft import Verdict
from playground.engine.sampling import logits_to_probs, sample
from playground.core.config import DrafterKind
from playground.run.spec import DrafterSpec
from playground.run.runner import new_tokens
from tests.helpers import CHI2_999, fit, load_pair, random_dists, run_all, two_token_test
from tests.test_runner import target_greedy


def wrong_rule(draft_tokens, draft_probs, target_probs, generator) -> Verdict:
    """A plausible bug: the correction drawn from q instead of norm(max(0, q - p))."""
    k = draft_tokens.shape[0]
    pos = torch.arange(k)
    u = torch.rand(k, generator=generator)
    n = (u * draft_probs[pos, draft_tokens] < target_probs[pos, draft_tokens]).long().cumprod(0).sum()
    return Verdict(n, sample(target_probs[n], generator), u)


def synthetic_outputs(rule, p, q, samples, seed=0, deterministic=False):
    """Run `rule` on context-free draft distributions p (k, V) and target q (k + 1, V); the i-th
    output token must then be distributed as q[i]. Returns the first two output tokens per run
    (-1 where the run kept only one)."""
    g = torch.Generator().manual_seed(seed)
    k = p.shape[0]
    firsts, seconds = [], []
    for _ in range(samples):
        x = sample(p, g)
        verdict = rule(x, None if deterministic else p, q, g)
        n, token = int(verdict.num_accepted), int(verdict.next_token)
        out = x[:n].tolist() + [token]
        firsts.append(out[0])
        seconds.append(out[1] if len(out) > 1 else -1)
    return torch.tensor(firsts), torch.tensor(seconds)


def test_rule_output_follows_target_distribution():
    vocab, k, samples = 5, 3, 20_000
    p, q = random_dists(k, vocab, seed=1), random_dists(k + 1, vocab, seed=2)
    firsts, seconds = synthetic_outputs(chain_sampling, p, q, samples)
    for tokens, target in ((firsts, q[0]), (seconds, q[1])):
        stat, critical = fit(tokens, target)
        assert stat < critical, (stat, critical)
    # The draft is not the target: the test exercises rejections and the residual.
    assert (firsts != -1).all() and 0.2 < (seconds == -1).float().mean() < 0.9


def test_wrong_rule_is_caught_by_the_same_test():
    vocab, k, samples = 5, 3, 20_000
    p, q = random_dists(k, vocab, seed=1), random_dists(k + 1, vocab, seed=2)
    firsts, _ = synthetic_outputs(wrong_rule, p, q, samples)
    stat, critical = fit(firsts, q[0])
    assert stat > critical, (stat, critical)


def test_deterministic_drafter_keeps_target_distribution():
    """Prompt lookup proposes tokens with no distribution: p is one-hot on the proposal."""
    vocab, k, samples = 5, 2, 20_000
    p, q = random_dists(k, vocab, seed=3), random_dists(k + 1, vocab, seed=4)
    firsts, seconds = synthetic_outputs(chain_sampling, p, q, samples, deterministic=True)
    for tokens, target in ((firsts, q[0]), (seconds, q[1])):
        stat, critical = fit(tokens, target)
        assert stat < critical, (stat, critical)


def test_residual_is_normalised_positive_part():
    q = torch.tensor([0.5, 0.3, 0.2, 0.0])
    p = torch.tensor([0.2, 0.5, 0.1, 0.2])
    torch.testing.assert_close(residual(q, p), torch.tensor([0.3, 0.0, 0.1, 0.0]) / 0.4)
    torch.testing.assert_close(residual(q, q), q)  # no mass: never drawn from, kept total


def test_top_k_and_top_p_filter_the_same_way_for_both_models():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, -3.0]])
    probs = logits_to_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    assert (probs[0, 2:] == 0).all() and abs(probs.sum() - 1) < 1e-6
    full = torch.softmax(logits, -1)[0]
    nucleus = logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=0.7))[0]
    # Keep the smallest prefix of the sorted tokens holding >= 0.7 of the mass.
    keep = int((full.cumsum(0) < 0.7).sum()) + 1
    assert (nucleus[:keep] > 0).all() and (nucleus[keep:] == 0).all()
    greedy_view = logits_to_probs(logits, SamplingParams(temperature=0.0))
    torch.testing.assert_close(greedy_view, torch.softmax(logits, -1))


@pytest.mark.parametrize("kind", list(DrafterKind)[:3])
def test_engine_two_token_distribution_equals_target(tiny_pair, kind):
    """End to end through the real loop on the tiny pair: the joint law of the first two tokens,
    over 2,000 seeds, equals the target's (top-k 4 keeps the table small enough to fill)."""
    prompt = "The quick brown fox jumps over the lazy dog. The quick"
    ids = encode_prompt(tiny_pair.tokenizer, prompt)
    seen = {"accepted": 0, "drafted": 0}

    def count(seed, r):
        seen["accepted"] += r.accepted
        seen["drafted"] += r.k

    stat, df = two_token_test(
        tiny_pair,
        lambda: make_drafter(DrafterSpec(kind), tiny_pair),
        ids,
        2000,
        count,
        max_new_tokens=2,
        k=2,
        temperature=1.5,
        top_k=4,
    )
    assert stat < CHI2_999[df], (stat, df)
    if kind is DrafterKind.DRAFT_MODEL:
        assert 0.1 < seen["accepted"] / seen["drafted"] < 0.95  # both accepts and rejections happened


@pytest.mark.parametrize("temperature", [1e-300, 5e-324])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_vanishing_temperature_gives_the_argmax_with_ties_split(temperature, dtype):
    """The limit of softmax(logits / T) as T -> 0, even where T is 0 in the logits' dtype: no inf, no nan."""
    logits = torch.tensor([[1.0, 2.0, 2.0, -3.0], [0.5, 0.25, 0.5 - 1e-6, float("-inf")]], dtype=dtype)
    probs = logits_to_probs(logits, SamplingParams(temperature=temperature))
    torch.testing.assert_close(probs, torch.tensor([[0, 0.5, 0.5, 0], [1.0, 0, 0, 0]], dtype=dtype))


@pytest.mark.parametrize("temperature", [1e-300, 5e-324])
@pytest.mark.parametrize("kind", [DrafterKind.DRAFT_MODEL, DrafterKind.SUFFIX])
def test_any_temperature_in_the_range_runs_through_the_runner(runner, tiny_spec, kind, temperature):
    """A temperature too small for fp32 (issue 55: it crashed the draft model's and suffix decoding's runs) decodes
    the argmax: the target's greedy tokens, through the rejection rule of a sampled run."""
    spec = tiny_spec("The quick brown fox", kind, max_new_tokens=20, k=3, temperature=temperature, seed=5)
    rounds = run_all(runner, spec)
    assert new_tokens(rounds) == target_greedy(load_pair(runner, spec), spec.prompt, 20)
    assert all(r.u for r in rounds if r.k)  # the sampling rule decided (its draws are recorded), not the greedy one
