"""Logits -> probabilities and sampling (the acceptance rules: acceptance.py).

Notation (used across the project): p = draft probability, q = target probability,
k = draft length.
"""

from __future__ import annotations

import torch

from playground.core.config import SamplingParams


def wide(x: torch.Tensor) -> torch.Tensor:
    """x in fp32, or in its own dtype where that is wider (fp64: the golden traces run the tiny pairs in fp64, where
    every CPU agrees, and no step may round them back to fp32)."""
    return x if x.dtype == torch.float64 else x.float()


def logits_to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Rows of logits (..., V) -> the distribution sampling draws from.

    Temperature, then top-k, then top-p (nucleus), applied the same way to draft and
    target so that the acceptance rule compares like with like. Greedy params give the
    plain softmax (temperature 1), which is what the views show as p and q.
    """
    logits = wide(logits)
    if params.greedy:
        return torch.softmax(logits, dim=-1)
    # The largest logit shifted to 0 before dividing: no temperature in (0, 2] overflows, and one that is 0 in this
    # dtype (1e-300 in fp32) gives the limit, the argmax with ties split evenly, instead of inf / inf.
    shifted = logits - logits.amax(-1, keepdim=True)
    logits = torch.where(shifted < 0, shifted / params.temperature, 0.0)
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
    """Next token(s) from raw logits: argmax when greedy, else a draw. The argmax of bf16 logits is taken in fp32
    (exact, the same index, ties to the first), which is faster than torch's bf16 argmax (docs/levers.md)."""
    if params.greedy:
        return (logits.float() if logits.dtype == torch.bfloat16 else logits).argmax(-1)
    return sample(logits_to_probs(logits, params), generator)
