"""Prompt lookup: the sequence's n-grams draft (no model)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from playground.core.config import DrafterKind
from playground.decoding.options import Context, Peer, Strategy, Widget, typed, whole

if TYPE_CHECKING:
    from playground.core.draft import Drafter
    from playground.models import LoadedPair

MAX_NGRAM, NGRAM = (1, 8), 3  # the longest n-gram matched: its range, its default
K_ARGUMENT = "prompt_lookup_num_tokens"  # transformers' generate() argument that takes k (suffix's peer's too)
# the page's control, staged drafting's too (its lookup's)
WIDGETS = (
    Widget(
        "max_ngram", "Max n-gram", *MAX_NGRAM, help="prompt lookup and staged: the longest n-gram matched", box=True
    ),
)


@dataclass(frozen=True)
class Options:
    max_ngram: int = NGRAM  # the longest n-gram matched

    def __post_init__(self) -> None:
        typed(self, max_ngram=whole(self.max_ngram, *MAX_NGRAM, "The prompt-lookup n-gram size"))

    @property
    def label(self) -> str:
        return ngram_label(self.max_ngram)


def ngram_label(max_ngram: int) -> str:
    """The longest n-gram where it is not the default: "n-grams up to 5"."""
    return f"n-grams up to {max_ngram}" if max_ngram != NGRAM else ""


def build(o: Options, pair: LoadedPair, run: Context) -> Drafter:
    from playground.decoding.lookup import PromptLookupDrafter

    return PromptLookupDrafter(max_ngram=o.max_ngram)


STRATEGY = Strategy(
    DrafterKind.PROMPT_LOOKUP,
    build,
    ran="draft: prompt lookup (no model)",
    options=Options,
    widgets=WIDGETS,
    hf=Peer("prompt lookup", bench=True, k=K_ARGUMENT, config=lambda o: {"max_matching_ngram_size": o.max_ngram}),
    vllm=Peer("ngram", bench=True, config=lambda o: {"prompt_lookup_max": o.max_ngram, "prompt_lookup_min": 1}),
)
