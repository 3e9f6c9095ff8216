"""A draft model drafts k tokens, one forward each. Its options: the draft's precision, a vocabulary subset."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from playground.core.config import DrafterKind, Precision
from playground.decoding.options import Context, HFObject, Peer, Strategy, Widget, precision_of, typed
from playground.core.errors import PlaygroundError, shown
from playground.core.numbers import is_int

if TYPE_CHECKING:
    from playground.core.draft import Drafter
    from playground.models import LoadedPair

NAMES = {"vocab": "draft_vocab"}  # "draft model:int8,vocab=32768" (a bare word: the precision)
WIDGETS = (
    Widget(
        "draft_vocab",
        "Vocab (0 = all)",
        0,
        262_144,
        256,
        help="draft model drafter, chains only: it proposes from the first N token ids and the sequence's own; 0: all",
        box=True,
    ),
)


@dataclass(frozen=True)
class Options:
    precision: Precision | None = None  # None = the device default (models.default_draft_precision)
    draft_vocab: int = 0  # chains: propose from the first N token ids and the sequence's (0: all; decoding/vocab.py)

    def __post_init__(self) -> None:
        precision_of(self)
        v = self.draft_vocab
        if isinstance(v, bool) or not is_int(v) or not (v == 0 or 256 <= v <= 10**6):
            raise PlaygroundError(
                f"The draft vocabulary must be 0 (all of it) or a whole number of tokens from 256 to "
                f"1,000,000, got {shown(v)}."
            )
        typed(self, draft_vocab=int(v))

    @property
    def why_no_tree(self) -> str:
        return "A draft vocabulary subset drafts chains only; a token tree takes the whole vocabulary." * bool(
            self.draft_vocab
        )

    @property
    def label(self) -> str:
        parts = (self.precision and self.precision.value, self.draft_vocab and f"{self.draft_vocab:,} tokens")
        return ", ".join(p for p in parts if p)


def build(o: Options, pair: LoadedPair, run: Context) -> Drafter:
    from playground.decoding import vocab
    from playground.decoding.model import ModelDrafter

    size = o.draft_vocab
    if size and vocab.why_not(pair.draft, size):
        raise PlaygroundError(
            f"A draft vocabulary of {size:,} tokens does not apply: {vocab.why_not(pair.draft, size)}."
        )
    return ModelDrafter(pair.draft, run.confidence, size)


STRATEGY = Strategy(
    DrafterKind.DRAFT_MODEL,
    build,
    model="draft",
    same_tokenizer=True,
    pair_draft=True,
    tree=True,
    batch=True,
    ran="draft {draft}",
    options=Options,
    widgets=WIDGETS,
    names=NAMES,
    positional="precision",
    hf=Peer("assisted", bench=True, drafts=HFObject.DRAFT),  # transformers' assisted generation
    vllm=Peer("draft_model", bench=True),
)
