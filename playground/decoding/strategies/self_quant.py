"""Self int4 (quantised self-speculation): the target's own copy with int4 Linears drafts for it, no second model.
Its options: the bits (4, or 8: int8 per row), the int4 group size, whether the LM head is quantised too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from playground.core.config import DrafterKind
from playground.decoding.options import Context, Peer, Strategy, Widget, flag, typed
from playground.core.errors import PlaygroundError, shown
from playground.core.numbers import is_int

if TYPE_CHECKING:
    from playground.core.draft import Drafter
    from playground.models import LoadedPair

BITS = (4, 8)
GROUPS = (32, 64, 128, 256)  # weights per int4 scale: powers of two that divide the layers' widths
NAMES = {"bits": "self_bits", "group": "self_group_size", "head": "self_head"}  # "self int4:group=64,head=0"
WIDGETS = (
    Widget("self_bits", "Self int4: bits (4, or 8: int8 per row)", 4, 8, 4),
    Widget("self_group_size", "Self int4: int4 group size (weights per scale)", GROUPS[0], GROUPS[-1], 32),
    Widget("self_head", "Self int4: quantise the LM head too"),
)
ABOUT = (  # the UI's note above the widgets
    "self int4 only: the same model with cheaper numbers drafts for itself. The target's Linears are copied once "
    "to int4 (a scale per group of weights) or int8 (a scale per row), sharing its embedding and norms: no second "
    "model to load, about a quarter (int8: half) of the target's bf16 weights more memory, counted in the model "
    "cache's budget. CPU kernels only (a bf16 target)"
)

# What the exported code does instead ({tool}: transformers or vLLM): the target alone
NO_PEER = (
    "The playground's self int4 (the target's own quantised copy drafts for it) has no {tool} equivalent built in: "
    "this runs the target alone. A quantised copy of the target can be its draft model."
)


@dataclass(frozen=True)
class Options:
    self_bits: int = 4  # 4: group-wise int4 (kernels.model.quantize_int4); 8: int8 per row (quantize_int8)
    self_group_size: int = 32  # int4 only: weights per scale
    self_head: bool = True  # int4 only: the LM head in int4 too (int8: always int8)

    def __post_init__(self) -> None:
        bits, group = self.self_bits, self.self_group_size
        if isinstance(bits, bool) or not is_int(bits) or bits not in BITS:
            raise PlaygroundError(
                f"self int4: the bits must be 4 (int4, a scale per group) or 8 (int8, a scale per row), "
                f"got {shown(bits)}."
            )
        if isinstance(group, bool) or not is_int(group) or group not in GROUPS:
            raise PlaygroundError(
                f"self int4: the group size (weights per int4 scale) must be one of "
                f"{', '.join(map(str, GROUPS))}, got {shown(group)}."
            )
        typed(self, self_bits=int(bits), self_group_size=int(group), self_head=flag(self.self_head, "self int4: head"))
        if self.self_bits == 8 and not self.self_head:
            raise PlaygroundError(
                "self int4: at 8 bits the LM head is always int8; leaving it unquantised (head=0) is an int4 option."
            )

    @property
    def drafts_in(self) -> str:
        """The copy's precision, as the bench's tables name it: "int4" or "int8"."""
        return f"int{self.self_bits}"

    @property
    def label(self) -> str:
        """What differs from the default (int4, groups of 32, the head too): "int8", "groups of 64, bf16 head"."""
        if self.self_bits == 8:
            return "8 bits: int8 per row"
        parts = [f"groups of {self.self_group_size}"] * (self.self_group_size != 32)
        return ", ".join(parts + ["head unquantised"] * (not self.self_head))


def build(o: Options, pair: LoadedPair, run: Context) -> Drafter:
    """The target's quantised copy, made once per loaded target (the model cache keeps it), on its own KV cache."""
    from playground.decoding.self_quant import SelfQuantDrafter, quantised_copy

    copied = quantised_copy(pair, o.self_bits, o.self_group_size, o.self_head, run.progress)
    return SelfQuantDrafter(copied, run.confidence)


STRATEGY = Strategy(
    DrafterKind.SELF_QUANT,
    build,
    model="copy",
    tree=True,
    ran="draft: the target's own quantised copy (of its {target} weights)",
    options=Options,
    widgets=WIDGETS,
    about=ABOUT,
    names=NAMES,
    aliases={"self int8": "bits=8"},
    hf=Peer("target alone", NO_PEER),
    vllm=Peer("target alone", NO_PEER),
)
