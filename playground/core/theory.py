"""Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding", and the
same model calibrated to the machine at hand.

alpha: probability that the target accepts a draft token; k: draft length;
c: cost of one draft step relative to one target step;
V(n): seconds of one target pass that scores n new tokens on top of its KV cache;
v(k) = V(k + 1) / V(1): the verify cost of a round in target steps. Leviathan et al. assume v = 1
(checking k + 1 tokens costs one step, true when decoding is memory-bound, as on a GPU); on some
CPU kernels it is not, and the calibrated model uses the measured v(k).
Pure functions, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens per round: (1 - alpha^(k+1)) / (1 - alpha)  (their eq. 1)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def expected_tokens_tree(alpha: float | Sequence[float], branching: Sequence[int]) -> float:
    """Expected tokens per round of a token tree with branching[d] candidates per node at depth d + 1,
    when each candidate is accepted with probability alpha_d (one alpha, or one per depth), independently
    of its siblings (the i.i.d. model; it neglects that siblings compete for the same residual mass):

        E = 1 + sum_{d=1..D} prod_{j=1..d} (1 - (1 - alpha_j)^(b_j))

    A node passes depth j when any of its b_j children is accepted; the 1 is the target's own token.
    With every b_j = 1 it is the chain's E(alpha, D) = (1 - alpha^(D+1)) / (1 - alpha)."""
    alphas = [alpha] * len(branching) if isinstance(alpha, (int, float)) else list(alpha)
    if len(alphas) != len(branching):
        raise ValueError(f"one alpha per depth: {len(alphas)} alphas for {len(branching)} depths")
    total, reach = 1.0, 1.0
    for a, b in zip(alphas, branching):
        reach *= 1 - (1 - a) ** b
        total += reach
    return total


def speedup(alpha: float, k: int, c: float, v: float = 1.0) -> float:
    """Expected walltime improvement E(alpha, k) / (k c + v). With v = 1 this is their theorem 3.8,
    (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)); the calibrated model passes v = v(k) from a profile."""
    return expected_tokens(alpha, k) / (k * c + v)


def best_k(alpha: float, c: float, k_max: int = 16) -> int:
    """The k in 1..k_max that maximises Leviathan's ideal speedup (v = 1)."""
    return max(range(1, k_max + 1), key=lambda k: speedup(alpha, k, c))


@dataclass(frozen=True)
class CostProfile:
    """Measured costs of one target (and one drafter on it): V(n) in seconds for the n measured,
    and the draft's seconds per drafted token (0 when unknown or free)."""

    verify_s: dict[int, float]  # n -> seconds of one target pass over n new tokens
    draft_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.verify_s or any(n < 1 or not s > 0 for n, s in self.verify_s.items()):
            raise ValueError(f"a cost profile needs positive V(n) for n >= 1, got {self.verify_s!r}")

    @property
    def step_s(self) -> float:
        """One target step, V(1) (the nearest measured n when 1 was not)."""
        return self.V(1)

    def V(self, n: int) -> float:
        """V(n): measured, or linear between the nearest measured neighbours (flat beyond the ends)."""
        if n in self.verify_s:
            return self.verify_s[n]
        ns = sorted(self.verify_s)
        lower = [m for m in ns if m < n]
        upper = [m for m in ns if m > n]
        if not lower:
            return self.verify_s[upper[0]]
        if not upper:
            return self.verify_s[lower[-1]]
        a, b = lower[-1], upper[0]
        return self.verify_s[a] + (self.verify_s[b] - self.verify_s[a]) * (n - a) / (b - a)

    def v(self, k: int) -> float:
        """Verify cost of a round with k drafts, in target steps: V(k + 1) / V(1)."""
        return self.V(k + 1) / self.step_s

    @property
    def c(self) -> float:
        return self.draft_s / self.step_s


def calibrated_speedup(
    alpha: float, k: int, c: float, profile: CostProfile, tokens_per_round: float | None = None
) -> float:
    """E_tokens / (k c + v(k)) with this machine's v(k). E_tokens is the i.i.d. E(alpha, k) unless the
    run's own measured tokens per round is given (acceptances come in runs, not independently)."""
    if k == 0:
        return 1.0
    expected = expected_tokens(alpha, k) if tokens_per_round is None else tokens_per_round
    return expected / (k * c + profile.v(k))


def run_speedup(alpha: float, k: int, c: float, profile: CostProfile, tokens: int, first_round_s: float) -> float:
    """The calibrated speedup of a whole run of `tokens` new tokens, with its one-off cost: the first
    round scores the prompt (and fills the draft's cache), which the target alone pays too (its own
    first pass). Time of the speculative run: first_round_s + (tokens - E) / E rounds of (k c + v(k))
    steps; of the target alone: about first_round_s - k c steps + (tokens - 1) steps. Tends to
    calibrated_speedup for long runs; a long prompt and few tokens pull it towards 1, and below it
    when the draft's prefill is slow."""
    if k == 0 or tokens <= 0:
        return 1.0
    step = profile.step_s
    expected = expected_tokens(alpha, k)
    spec_s = first_round_s + max(0.0, tokens - expected) / expected * (k * c + profile.v(k)) * step
    base_s = max(step, first_round_s - k * c * step - (profile.V(k + 1) - step)) + (tokens - 1) * step
    return base_s / spec_s


def best_k_calibrated(alpha: float, c: float, profile: CostProfile, k_max: int = 16, k_min: int = 1) -> int:
    """The k in k_min..k_max with the best calibrated speedup; k_min = 0 allows "do not draft"
    (a plain target step, speedup 1) when no k pays."""
    return max(range(k_min, k_max + 1), key=lambda k: (calibrated_speedup(alpha, k, c, profile), -k))


@dataclass
class AcceptanceEstimate:
    """alpha from the rounds so far, recent rounds weighing more (acceptance comes in streaks), with a
    uniform prior; each round also decays the evidence, so a run that stopped drafting tries again."""

    decay: float = 0.8
    accepted: float = 1.0  # prior: one accepted of two evaluated
    evaluated: float = 2.0

    def update(self, drafted: int, accepted: int) -> None:
        self.accepted = self.decay * self.accepted + (1 - self.decay) * 1.0 + accepted
        self.evaluated = (
            self.decay * self.evaluated + (1 - self.decay) * 2.0 + (min(drafted, accepted + 1) if drafted else 0)
        )

    @property
    def alpha(self) -> float:
        return min(0.999, self.accepted / self.evaluated)
