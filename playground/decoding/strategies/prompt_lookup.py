"""Prompt lookup: the sequence's n-grams draft (no model)."""

from __future__ import annotations

from dataclasses import dataclass

from playground.config import DrafterKind
from playground.decoding.options import Build, Strategy, typed, whole

MAX_NGRAM = (1, 8)


@dataclass(frozen=True)
class Options:
    max_ngram: int = 3  # the longest n-gram matched

    def __post_init__(self) -> None:
        typed(self, max_ngram=whole(self.max_ngram, *MAX_NGRAM, "The prompt-lookup n-gram size"))

    @property
    def label(self) -> str:
        return ""


def build(b: Build):
    from playground.decoding.lookup import PromptLookupDrafter

    return PromptLookupDrafter(max_ngram=b.options.max_ngram)


STRATEGY = Strategy(DrafterKind.PROMPT_LOOKUP, build, ran="draft: prompt lookup (no model)", options=Options)
