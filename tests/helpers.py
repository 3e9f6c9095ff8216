"""What several test modules share: the prompts, the greedy reference, and the chi-square test of the
acceptance rules (the statistic, its critical values, and the loop that counts the first two tokens of
many seeded runs through the real engine)."""

from __future__ import annotations

from typing import Callable

import torch

from playground.core.draft import Drafter
from playground.engine import SpeculativeDecoder
from playground.core.records import RoundRecord
from playground.core.config import KPolicy, SamplingParams
from playground.engine.sampling import logits_to_probs, sample
from playground.core.config import DecodeConfig

# DecodeConfig's defaults before issue 45 made them the page's (128 tokens, the draft-confidence policy): the tests
# written against them say them, so that they keep their meaning.
FIXED_64 = dict(max_new_tokens=64, policy=KPolicy.FIXED)

PROMPTS = [
    "def fibonacci(n):",
    "Once upon a time",
    "The quick brown fox",
    "Question: what is the capital of France? Answer:",
    "for i in range(10):\n    print(i",
    "x",
    "import numpy as np\nx = np.zeros(3)\nimport numpy as np\nx =",
    "<|endoftext|> & <script>",
]
# Text that repeats itself: what draft-free drafters (suffix, lookahead's prompt pool) draft from.
REPEAT = (
    "def f(x):\n    return x + 1\n\ndef g(x):\n    return x + 1\n\ndef f(x):\n    return x + 1\n\ndef g(x):\n    return"
)


def load_pair(runner, spec, progress=None, warm=False):
    """A spec's pair through runner.session: loaded and on the spec's kernels (and warm when asked); the session ends
    here, so the pair is not held in use."""
    with runner.session(spec, *([progress] if progress is not None else []), warm=warm) as session:
        return session.ready().pair


def warmed(runner, spec) -> bool:
    """Whether the spec's first run would pay no warm-up (Session.warmed), asked without warming."""
    with runner.session(spec, warm=False) as session:
        return session.warmed()


def profile(runner, spec):
    """The runner's measured costs for the spec (Session.profile), asked without warming."""
    with runner.session(spec, warm=False) as session:
        return session.profile()


def run_all(runner, spec, progress=None, kept=None) -> list[RoundRecord]:
    """A spec's rounds through runner.session, the one way anything decodes."""
    with runner.session(spec, *([progress] if progress is not None else []), kept=kept) as session:
        return list(session.rounds())


def target_greedy(target, ids, max_new_tokens, eos):
    """The reference: HF generate, greedy. With no EOS ids it runs to the budget."""
    stop = sorted(eos) if eos else [target.config.vocab_size + 1]  # an id the model cannot emit
    out = target.generate(ids, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=stop, pad_token_id=0)
    return out[0, ids.shape[1] :].tolist()


def decode(pair, drafter: Drafter, ids, eos=None, **cfg) -> tuple[SpeculativeDecoder, list[RoundRecord]]:
    """A decoder on the pair's target with this drafter, run to the end: (decoder, rounds)."""
    dec = SpeculativeDecoder(pair.target, drafter, ids, DecodeConfig(**cfg), pair.eos if eos is None else eos)
    return dec, list(dec)


# ---------------------------------------------------------------- tokenizer stand-ins for the views

WORDS = {1: " the", 2: " cat", 3: " sat", 4: " dog", 5: " a", 6: " "}


class Words:
    """A tokenizer stand-in: token id -> a fixed word."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(WORDS[i] for i in ids)


class Hostile:
    """Every token decodes to markup."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join("<b>&" for _ in ids)


# ---------------------------------------------------------------- the chi-square test

# Upper 1e-3 quantiles of chi-square by degrees of freedom (scipy.stats.chi2.ppf(0.999, df)).
CHI2_999 = {
    1: 10.828,
    2: 13.816,
    3: 16.266,
    4: 18.467,
    5: 20.515,
    6: 22.458,
    7: 24.322,
    8: 26.124,
    9: 27.877,
    10: 29.588,
    11: 31.264,
    12: 32.909,
    13: 34.528,
    14: 36.123,
    15: 37.697,
}


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


def fit(tokens: torch.Tensor, probs: torch.Tensor) -> tuple[float, float]:
    """(chi-square of the tokens' counts against probs, its critical value at 1e-3)."""
    counts = torch.bincount(tokens[tokens >= 0], minlength=probs.shape[0]).double()
    stat, df = chi_square(counts, probs.double())
    return stat, CHI2_999[df]


def random_dists(rows: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(2.0 * torch.randn(rows, vocab, generator=g), -1)


def exact_two_token_distribution(pair, ids, params: SamplingParams) -> torch.Tensor:
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


def two_token_test(
    pair,
    make_drafter: Callable[[], Drafter],
    ids,
    runs: int,
    on_round: Callable[[int, RoundRecord], None] | None = None,
    **cfg,
) -> tuple[float, int]:
    """The first two tokens of `runs` seeded runs through the real engine (a fresh drafter each, no EOS),
    against the target's exact joint law: (chi-square, degrees of freedom). on_round(seed, record) sees
    every round."""
    exact = exact_two_token_distribution(pair, ids, DecodeConfig(**cfg).sampling)
    vocab = pair.target.config.vocab_size
    counts = torch.zeros(vocab * vocab, dtype=torch.float64)
    for seed in range(runs):
        dec = SpeculativeDecoder(pair.target, make_drafter(), ids, DecodeConfig(seed=seed, record=False, **cfg), set())
        for r in dec:
            if on_round is not None:
                on_round(seed, r)
        a, b = dec.new_tokens
        counts[a * vocab + b] += 1
    return chi_square(counts, exact)


# ---------------------------------------------------------------- draft-free drafters


def branching_prompt(pair, text: str = "Once upon a time") -> torch.Tensor:
    """`text`, its target's two likeliest next tokens t1 and t2, and `text` again each time: text t1 text t2 text.
    Its end has occurred twice before, followed by t1 and by t2: a draft-free drafter proposes them, and the
    looping (bigram) target gives them mass whatever came before."""
    from playground.run.runner import encode_prompt

    base = encode_prompt(pair.tokenizer, text)[0].tolist()
    with torch.inference_mode():
        t1, t2 = pair.target(input_ids=torch.tensor([base])).logits[0, -1].topk(2).indices.tolist()
    return torch.tensor([base + [t1] + base + [t2] + base])


def broken_select(q, cands, generator, renormalise=True, residual=True):
    """acceptance.select_candidate with the two ways to get it wrong as switches (test-only): not renormalising r after
    a refusal (keep x_i with q(x_i) itself), and drawing the fallback from q instead of from what is left."""
    r = q.clone()
    for i, x in enumerate(cands):
        u = torch.rand((), generator=generator)
        if u < r[x]:
            return i, x
        r[x] = 0.0  # x_i's mass is gone; without renormalising, later candidates are kept too rarely
        if renormalise:
            r = r / r.sum()
    return -1, int(sample(r / r.sum() if residual else q, generator))
