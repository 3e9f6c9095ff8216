"""The acceptance rule keeps the target's distribution (Leviathan et al. 2023, Chen et al. 2023).

Statistical tests: chi-square goodness of fit at significance 1e-3 against the exact target
distribution. Each test also runs a deliberately wrong rule through the same statistic, to show
the sample is large enough to catch one.
"""
from __future__ import annotations

import pytest
import torch

from playground.engine import SpeculativeDecoder
from playground.runner import encode_prompt, make_drafter
from playground.spec import DecodeConfig, DrafterKind, DrafterSpec
from playground.sampling import SamplingParams, Verdict, logits_to_probs, residual, sample, verify_sampling

# Upper 1e-3 quantiles of chi-square by degrees of freedom (scipy.stats.chi2.ppf(0.999, df)).
CHI2_999 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458, 7: 24.322, 8: 26.124,
            9: 27.877, 10: 29.588, 11: 31.264, 12: 32.909, 13: 34.528, 14: 36.123, 15: 37.697}


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic and its degrees of freedom; cells expected under 5 are pooled."""
    n = counts.sum()
    expected = probs * n
    small = expected < 5
    if small.any():
        counts = torch.cat([counts[~small], counts[small].sum().view(1)])
        expected = torch.cat([expected[~small], expected[small].sum().view(1)])
    keep = expected > 0
    stat = ((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum().item()
    return stat, int(keep.sum().item()) - 1


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


def random_dists(rows: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2.0 * torch.randn(rows, vocab, generator=g), -1)


def fit(tokens: torch.Tensor, probs: torch.Tensor) -> tuple[float, float]:
    counts = torch.bincount(tokens[tokens >= 0], minlength=probs.shape[0]).double()
    stat, df = chi_square(counts, probs.double())
    return stat, CHI2_999[df]


def test_rule_output_follows_target_distribution():
    vocab, k, samples = 5, 3, 20_000
    p, q = random_dists(k, vocab, seed=1), random_dists(k + 1, vocab, seed=2)
    firsts, seconds = synthetic_outputs(verify_sampling, p, q, samples)
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
    firsts, seconds = synthetic_outputs(verify_sampling, p, q, samples, deterministic=True)
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


def _exact_two_token_distribution(pair, ids, params) -> torch.Tensor:
    """P(first two tokens) under the target alone, as a flat (V * V) vector."""
    with torch.inference_mode():
        first = logits_to_probs(pair.target(input_ids=ids).logits[0, -1], params)
        support = first.nonzero().flatten()
        joint = torch.zeros(first.shape[0], first.shape[0], dtype=torch.float64)
        for t in support.tolist():
            ext = torch.cat([ids, torch.tensor([[t]])], 1)
            second = logits_to_probs(pair.target(input_ids=ext).logits[0, -1], params)
            joint[t] = first[t].double() * second.double()
    return joint.flatten()


@pytest.mark.parametrize("kind", list(DrafterKind)[:3])
def test_engine_two_token_distribution_equals_target(tiny_pair, kind):
    """End to end through the real loop on the tiny pair: the joint law of the first two tokens,
    over 2,000 seeds, equals the target's (top-k 4 keeps the table small enough to fill)."""
    prompt = "The quick brown fox jumps over the lazy dog. The quick"
    ids = encode_prompt(tiny_pair.tokenizer, prompt)
    cfg = dict(max_new_tokens=2, k=2, temperature=1.5, top_k=4)
    exact = _exact_two_token_distribution(tiny_pair, ids, DecodeConfig(**cfg).sampling)
    vocab = tiny_pair.target.config.vocab_size
    counts = torch.zeros(vocab * vocab, dtype=torch.float64)
    accepted = drafted = 0
    for seed in range(2000):
        dec = SpeculativeDecoder(tiny_pair.target, make_drafter(DrafterSpec(kind), tiny_pair), ids,
                                 DecodeConfig(seed=seed, record=False, **cfg), set())
        for r in dec:
            accepted, drafted = accepted + r.accepted, drafted + r.k
        a, b = dec.new_tokens
        counts[a * vocab + b] += 1
    stat, df = chi_square(counts, exact)
    assert stat < CHI2_999[df], (stat, df)
    if kind is DrafterKind.DRAFT_MODEL:
        assert 0.1 < accepted / drafted < 0.95  # both accepts and rejections happened
