"""A draft model with its own tokenizer, translated through text. Its option: the draft's precision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from playground.config import DrafterKind, Precision
from playground.decoding.options import Context, Strategy, precision_of

if TYPE_CHECKING:
    from playground.draft import Drafter
    from playground.models import LoadedPair


@dataclass(frozen=True)
class Options:
    precision: Precision | None = None  # None = the device default (models.default_draft_precision)

    def __post_init__(self) -> None:
        precision_of(self)

    @property
    def label(self) -> str:
        return self.precision.value if self.precision else ""


def build(o: Options, pair: LoadedPair, run: Context) -> Drafter:
    """The confidence stop does not apply: the draft drafts greedily."""
    from playground.decoding.cross import CrossTokenizerDrafter

    draft_tok = pair.draft_tokenizer or pair.tokenizer
    return CrossTokenizerDrafter(pair.draft, draft_tok, pair.tokenizer, run.encode(draft_tok) if run.encode else None)


STRATEGY = Strategy(DrafterKind.CROSS_TOKENIZER, build, model="draft", pair_draft=True, options=Options)
