"""Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding".

alpha: probability that the target accepts a draft token; k: draft length;
c: cost of one draft step relative to one target step.
"""
from __future__ import annotations


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens per round: (1 - alpha^(k+1)) / (1 - alpha)  (their eq. 1)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def speedup(alpha: float, k: int, c: float) -> float:
    """Expected walltime improvement: (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1))  (their theorem 3.8)."""
    return expected_tokens(alpha, k) / (k * c + 1)


def best_k(alpha: float, c: float, k_max: int = 16) -> int:
    """The k in 1..k_max that maximises the expected speedup."""
    return max(range(1, k_max + 1), key=lambda k: speedup(alpha, k, c))
