"""Logits -> probabilities, sampling, and the rejection-sampling acceptance rule.

Notation (used across the project): p = draft probability, q = target probability,
k = draft length.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from playground.config import SamplingParams


def logits_to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Rows of logits (..., V) -> the distribution sampling draws from.

    Temperature, then top-k, then top-p (nucleus), applied the same way to draft and
    target so that the acceptance rule compares like with like. Greedy params give the
    plain softmax (temperature 1), which is what the views show as p and q.
    """
    logits = logits.float()
    if params.greedy:
        return torch.softmax(logits, dim=-1)
    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the tokens before it already hold top_p of the mass;
        # the most likely token always stays.
        drop_sorted = (sorted_probs.cumsum(-1) - sorted_probs) >= params.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.softmax(logits, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token id per row of probs (..., V) -> (...)."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def choose(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> torch.Tensor:
    """Next token(s) from raw logits: argmax when greedy, else a draw."""
    if params.greedy:
        return logits.argmax(-1)
    return sample(logits_to_probs(logits, params), generator)


def residual(q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """norm(max(0, q - p)): where the correction token is drawn after a rejection.

    If q == p exactly the residual has no mass, but then nothing is ever rejected
    there; q is returned to keep the function total.
    """
    diff = (q - p).clamp_min(0.0)
    mass = diff.sum(-1, keepdim=True)
    return torch.where(mass > 0, diff / mass.clamp_min(1e-30), q)


@dataclass
class Verdict:
    """What verification decided, still on the device (one host sync reads it)."""

    num_accepted: torch.Tensor  # () long: n, how many draft tokens were kept
    next_token: torch.Tensor  # () long: the correction (n < k) or bonus (n == k) token
    u: torch.Tensor | None  # (k,) the uniform draws, sampling only


def verify_greedy(draft_tokens: torch.Tensor, target_logits: torch.Tensor) -> Verdict:
    """Accept the longest prefix where the draft equals the target's argmax.

    draft_tokens: (k,), target_logits: (k + 1, V). The next token is the target's argmax
    after the kept prefix, so the output is exactly target-only greedy decoding.
    """
    k = draft_tokens.shape[0]
    target_tokens = target_logits.argmax(-1)
    matches = (draft_tokens == target_tokens[:k]).long()
    n = matches.cumprod(0).sum()
    return Verdict(num_accepted=n, next_token=target_tokens[n], u=None)


def verify_sampling(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None,
) -> Verdict:
    """The rejection-sampling rule of Leviathan et al. 2023 / Chen et al. 2023.

    q: target prob, p: draft prob. Accept draft token x_i with probability
    min(1, q_i(x_i) / p_i(x_i)); at the first rejection draw the correction from
    norm(max(0, q_i - p_i)); if all k are kept, draw a bonus token from q_k.
    draft_probs None means a deterministic drafter (p is one-hot on x_i).

    draft_tokens: (k,), draft_probs: (k, V) or None, target_probs: (k + 1, V).
    Everything stays on the device: the branch is an index, not a host decision.
    """
    k = draft_tokens.shape[0]
    positions = torch.arange(k, device=draft_tokens.device)
    if draft_probs is None:
        draft_probs = torch.zeros_like(target_probs[:k])
        draft_probs[positions, draft_tokens] = 1.0
    q_x = target_probs[positions, draft_tokens]
    p_x = draft_probs[positions, draft_tokens]
    u = torch.rand(k, generator=generator, device=draft_tokens.device)
    accepted = (u * p_x < q_x).long()  # u < q/p, without dividing by p
    n = accepted.cumprod(0).sum()
    # Row i < k: the residual at a rejection in position i; row k: the bonus distribution.
    candidates = torch.cat([residual(target_probs[:k], draft_probs), target_probs[k:]], dim=0)
    next_token = sample(candidates[n], generator)
    return Verdict(num_accepted=n, next_token=next_token, u=u)
