"""Prompt lookup: the sequence's n-grams draft (no model)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from playground.config import DrafterKind
from playground.decoding.options import Context, Strategy, typed, whole

if TYPE_CHECKING:
    from playground.draft import Drafter
    from playground.models import LoadedPair

MAX_NGRAM = (1, 8)


@dataclass(frozen=True)
class Options:
    max_ngram: int = 3  # the longest n-gram matched

    def __post_init__(self) -> None:
        typed(self, max_ngram=whole(self.max_ngram, *MAX_NGRAM, "The prompt-lookup n-gram size"))

    @property
    def label(self) -> str:
        return ""


def build(o: Options, pair: LoadedPair, run: Context) -> Drafter:
    from playground.decoding.lookup import PromptLookupDrafter

    return PromptLookupDrafter(max_ngram=o.max_ngram)


STRATEGY = Strategy(DrafterKind.PROMPT_LOOKUP, build, ran="draft: prompt lookup (no model)", options=Options)
