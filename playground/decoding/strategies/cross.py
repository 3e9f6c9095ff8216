"""A draft model with its own tokenizer, translated through text. Its option: the draft's precision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from playground.core.config import DrafterKind, Precision
from playground.decoding.options import NONE, Context, HFObject, Peer, Strategy, precision_of

if TYPE_CHECKING:
    from playground.core.draft import Drafter
    from playground.models import LoadedPair

NO_VLLM = (  # the vLLM export's whole snippet, as comments
    "This run's draft has its own tokenizer. vLLM's draft-model speculation expects the target's\n"
    "vocabulary; check your vLLM version's documentation for drafts with another vocabulary,\n"
    "or use HF's universal assisted decoding (the transformers snippet)."
)


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


STRATEGY = Strategy(
    DrafterKind.CROSS_TOKENIZER,
    build,
    model="draft",
    pair_draft=True,
    options=Options,
    positional="precision",
    hf=Peer("universal", bench=True, drafts=HFObject.DRAFT),  # transformers' universal assisted decoding
    vllm=Peer(NONE, NO_VLLM),
)
