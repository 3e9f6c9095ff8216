"""Drafters without a draft model: prompt lookup (n-grams of the sequence) and the target alone."""

from __future__ import annotations

import torch

from playground.core.config import DrafterKind
from playground.decoding.chain import ChainDraft
from playground.core.draft import Draft, Drafter
from playground.core.config import SamplingParams


def lookup(seq: list[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Up to k tokens that followed the latest earlier match of seq's final n-gram (longest n first)."""
    if k <= 0:
        return []
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        tail = seq[-n:]
        for start in range(len(seq) - n - 1, -1, -1):
            if seq[start : start + n] == tail:
                follow = seq[start + n : start + n + k]
                if follow:
                    return follow
    return []


class PromptLookupDrafter(Drafter):
    """No second model: find the latest earlier occurrence of the sequence's last n-gram
    and propose the tokens that followed it (Saxena 2023, "prompt lookup decoding").

    Deterministic, so the acceptance rule treats p as one-hot on each proposed token.
    """

    name = DrafterKind.PROMPT_LOOKUP.value

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        seq = ids[0].tolist()
        return ChainDraft(
            torch.tensor(lookup(seq, k, self.max_ngram, self.min_ngram), dtype=torch.long, device=ids.device), None
        )


class NoDrafter(Drafter):
    """Proposes nothing: every round is one plain target step. This is the autoregressive
    baseline, run through the same loop and instrumentation as speculative decoding."""

    name = DrafterKind.TARGET_ALONE.value

    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        return ChainDraft(ids.new_empty(0), None)
