"""Staged: prompt lookup drafts for the draft model, which drafts for the target. Its options: the draft's
precision, the lookup's longest n-gram."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from playground.core.config import DrafterKind, Precision
from playground.decoding.options import Context, HFObject, Peer, Strategy, precision_of, typed, whole
from playground.decoding.strategies import prompt_lookup
from playground.core.numbers import fmt

if TYPE_CHECKING:
    from playground.core.draft import Drafter
    from playground.models import LoadedPair

# The peers run the draft model alone ({tool}: transformers or vLLM); vLLM's bench rows stand beside it too
ALONE = (
    "The playground's staged drafting (prompt lookup drafting for the draft model) has no {tool} equivalent: the "
    "draft model alone drafts here."
)


@dataclass(frozen=True)
class Options:
    precision: Precision | None = None  # the draft model's; None = the device default
    max_ngram: int = prompt_lookup.Options.max_ngram  # the lookup's longest n-gram: prompt lookup's default

    def __post_init__(self) -> None:
        precision_of(self)
        typed(self, max_ngram=whole(self.max_ngram, *prompt_lookup.MAX_NGRAM, "The prompt-lookup n-gram size"))

    @property
    def label(self) -> str:
        return ", ".join(
            p for p in (self.precision and self.precision.value, prompt_lookup.ngram_label(self.max_ngram)) if p
        )


def build(o: Options, pair: LoadedPair, run: Context) -> Drafter:
    """A staged draft is always k long: no confidence stop."""
    from playground.decoding.staged import StagedDrafter

    return StagedDrafter(pair.draft, max_ngram=o.max_ngram)


def summary(s: dict) -> list[tuple[str, str]]:
    """The summary panel's row for a staged run (trace.summarize's sums of StagedExtras): the first level's
    tokens the draft model kept, and the draft model's passes per drafted token."""
    passes = s["stage_passes"] / s["drafted"] if s["drafted"] else None
    return [
        (
            "staged: lookup tokens the draft model kept · its passes per drafted token",
            f"{s['stage_accepted']} of {s['stage_proposed']} · {fmt(passes, 2)}",
        )
    ]


STRATEGY = Strategy(
    DrafterKind.STAGED,
    build,
    model="draft",
    same_tokenizer=True,
    ran="draft {draft}, its drafts by prompt lookup",
    options=Options,
    widgets=prompt_lookup.WIDGETS,  # prompt lookup's n-gram size: the page's one control serves both
    short="staged",  # its own name has a colon
    positional="precision",
    hf=Peer("assisted", ALONE, drafts=HFObject.DRAFT),
    vllm=Peer("draft_model", ALONE, bench=True),
    summary=summary,
)
