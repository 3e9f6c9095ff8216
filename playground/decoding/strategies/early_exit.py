"""Early exit (self-speculation): the target's first layers draft. Its option: how many layers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from playground.core.config import DrafterKind
from playground.decoding.options import NONE, Context, HFObject, Peer, Strategy, Widget, typed
from playground.core.errors import PlaygroundError, shown
from playground.core.numbers import is_int

if TYPE_CHECKING:
    from playground.core.draft import Drafter
    from playground.models import LoadedPair


LABEL = "Early-exit layer L (0 = a quarter of the target's layers)"
WIDGETS = (Widget("exit_layer", LABEL, 0, 64, help="early exit drafter only", unset=0),)  # 0: Options' None
NO_VLLM = (  # the vLLM export's whole snippet, as comments
    "vLLM has no early-exit (layer-skip) self-speculation for ordinary models.\n"
    "Use the draft model or prompt lookup drafter with vLLM, or HF's assistant_early_exit."
)
# the transformers export's note
LAYERSKIP = "Early exit works best with models trained for it (LayerSkip, e.g. facebook/layerskip-llama3.2-1B)."


@dataclass(frozen=True)
class Options:
    exit_layer: int | None = None  # the target's layers that draft; None = a quarter of them

    def __post_init__(self) -> None:
        if self.exit_layer is not None:
            # >= 1 here; at most the target's layers once it is loaded (early_exit.early_exit_model)
            if isinstance(self.exit_layer, bool) or not is_int(self.exit_layer) or self.exit_layer < 1:
                raise PlaygroundError(
                    f"The early-exit layer must be a whole number >= 1 (or empty for a quarter "
                    f"of the target's layers), got {shown(self.exit_layer)}."
                )
            typed(self, exit_layer=int(self.exit_layer))

    @property
    def label(self) -> str:
        return f"L = {self.exit_layer}" if self.exit_layer else ""


def build(o: Options, pair: LoadedPair, run: Context) -> Drafter:
    """Shares the target's weights: its precision, no copy."""
    from playground.decoding.early_exit import EarlyExitDrafter

    return EarlyExitDrafter(pair.target, o.exit_layer, run.confidence)


def hf_arguments(o: Options) -> dict:
    """transformers' generate() argument: the layer, which the target must be loaded (or its config read) to resolve
    when the options leave it to the target (None: views/export_code.py's exit_layer, the Export tab's)."""
    if o.exit_layer is None:
        raise PlaygroundError(
            "Exporting early exit needs the exit layer: pass the resolved layer "
            "(a quarter of the target's layers by default)."
        )
    return {"assistant_early_exit": o.exit_layer}


STRATEGY = Strategy(
    DrafterKind.EARLY_EXIT,
    build,
    model="target",
    tree=True,
    ran="draft: the target's first layers ({target})",
    options=Options,
    widgets=WIDGETS,
    positional="exit_layer",  # "early exit:7"
    hf=Peer("early exit", LAYERSKIP, drafts=HFObject.TARGET, config=hf_arguments),  # transformers' assistant_early_exit
    vllm=Peer(NONE, NO_VLLM),
)
