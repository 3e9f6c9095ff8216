"""A draft model with its own tokenizer, translated through text. Its option: the draft's precision."""

from __future__ import annotations

from dataclasses import dataclass

from playground.config import DrafterKind, Precision
from playground.decoding.options import Build, Strategy, precision_of


@dataclass(frozen=True)
class Options:
    precision: Precision | None = None  # None = the device default (models.default_draft_precision)

    def __post_init__(self) -> None:
        precision_of(self)

    @property
    def label(self) -> str:
        return self.precision.value if self.precision else ""


def build(b: Build):  # the confidence stop does not apply: the draft drafts greedily
    from playground.decoding.cross import CrossTokenizerDrafter

    draft_tok = b.pair.draft_tokenizer or b.pair.tokenizer
    return CrossTokenizerDrafter(b.pair.draft, draft_tok, b.pair.tokenizer, b.encode(draft_tok) if b.encode else None)


STRATEGY = Strategy(DrafterKind.CROSS_TOKENIZER, build, model="draft", pair_draft=True, options=Options)
