"""Staged: prompt lookup drafts for the draft model, which drafts for the target. Its options: the draft's
precision, the lookup's longest n-gram."""

from __future__ import annotations

from dataclasses import dataclass

from playground.config import DrafterKind, Precision
from playground.decoding.options import Build, Strategy, precision_of, typed, whole
from playground.decoding.strategies.prompt_lookup import MAX_NGRAM


@dataclass(frozen=True)
class Options:
    precision: Precision | None = None  # the draft model's; None = the device default
    max_ngram: int = 3  # the lookup's longest n-gram

    def __post_init__(self) -> None:
        precision_of(self)
        typed(self, max_ngram=whole(self.max_ngram, *MAX_NGRAM, "The prompt-lookup n-gram size"))

    @property
    def label(self) -> str:
        return self.precision.value if self.precision else ""


def build(b: Build):  # a staged draft is always k long: no confidence stop
    from playground.decoding.staged import StagedDrafter

    return StagedDrafter(b.pair.draft, max_ngram=b.options.max_ngram)


STRATEGY = Strategy(
    DrafterKind.STAGED,
    build,
    model="draft",
    same_tokenizer=True,
    ran="draft {draft}, its drafts by prompt lookup",
    options=Options,
)
