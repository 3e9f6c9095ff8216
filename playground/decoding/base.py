"""The drafter protocol and the draft it proposes (the KV-cache helpers drafters share: cache.py).

A drafter proposes up to k tokens after the current sequence and is told how many the target kept, like
transformers' candidate generators (get_candidates / update_candidate_strategy) and vLLM's proposers. The
engine calls, each round: depth(k) (how deep a draft to ask for), propose(), the draft's verify() (the target's
one pass and the acceptance rule), observe(), annotate(). Everything but propose has a default here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import DynamicCache, PreTrainedModel

from playground.decoding import chain
from playground.records import RoundRecord
from playground.config import SamplingParams
from playground.config import DecodeConfig


@dataclass
class Draft:
    """A chain of draft tokens. A strategy whose proposal is not a chain (a token tree) subclasses it and
    verifies its own way."""

    tokens: torch.Tensor  # (k',) long, k' <= k (a drafter may stop early)
    logits: torch.Tensor | None  # (k', V) raw draft logits, None for a deterministic drafter

    def verify(
        self,
        target: PreTrainedModel,
        cache: DynamicCache,
        ids: torch.Tensor,
        cached: int,
        config: DecodeConfig,
        generator: torch.Generator | None,
    ) -> RoundRecord:
        """The target scores ids[:, cached:] and the drafts in one pass; the chain rule keeps a prefix; the
        target's cache keeps the sequence and that prefix. The record's round, prefill and timings are the
        engine's to fill in."""
        return chain.verify(self, target, cache, ids, cached, config, generator)


class Drafter(Protocol):
    """A draft source. Subclass it to inherit the defaults (no state, nothing to add to a record)."""

    name: str

    def reset(self) -> None:
        """Forget everything: a new sequence starts."""

    def depth(self, k: int) -> int:
        """The draft length to ask for when the k policy says k (a token tree has a depth of its own)."""
        return k

    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        """Up to k tokens to follow ids (1, L)."""
        ...

    def observe(self, num_accepted: int) -> None:
        """The target kept the first num_accepted tokens of the last proposal."""

    def annotate(self, record: RoundRecord) -> None:
        """Add the strategy's own view of the round to its record (RoundRecord.extras); the engine calls it
        after observe()."""
