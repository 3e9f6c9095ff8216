"""Self-speculation: the target's first layers, its final norm and its own LM head draft (early exit, as in
LayerSkip), as a model drafter that shares every weight with the target (no copy)."""

from __future__ import annotations

import copy

from transformers import PreTrainedModel

from playground.core.config import DrafterKind
from playground.decoding.model import ModelDrafter
from playground.core.errors import PlaygroundError


def early_exit_model(target: PreTrainedModel, layers: int) -> PreTrainedModel:
    """The target's first `layers` decoder layers, its final norm and its own LM head, as a model
    of its own that shares every weight with the target. Decoders of the Llama / Qwen / Mistral family
    only: those run `self.layers[: config.num_hidden_layers]`, so a config with fewer layers is all it takes."""
    inner = getattr(target, "model", None)
    total = target.config.num_hidden_layers
    if inner is None or not hasattr(inner, "layers"):
        raise PlaygroundError(
            f"The early-exit drafter needs a Llama / Qwen / Mistral style decoder "
            f"(model.layers); {type(target).__name__} is not one."
        )
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers < total:
        raise PlaygroundError(
            f"The early-exit layer must be a whole number from 1 to {total - 1} for this "
            f"target ({total} layers), got {layers!r}."
        )
    config = copy.deepcopy(target.config)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:layers]
    shallow_inner = copy.copy(inner)  # new module objects, the same parameters
    shallow_inner.config = config
    shallow = copy.copy(target)
    shallow._modules = dict(target._modules) | {"model": shallow_inner}
    shallow.config = config
    return shallow


def default_exit_layer(target: PreTrainedModel) -> int:
    """A quarter of the target's layers (at least 1): cheap enough to pay off when the early
    layers already predict well."""
    return exit_layer_for(target.config.num_hidden_layers)


def exit_layer_for(layers: int) -> int:
    """default_exit_layer for a target of `layers` layers (known from its config, before it loads)."""
    return max(1, layers // 4)


class EarlyExitDrafter(ModelDrafter):
    """The target's first `layers` layers (None: default_exit_layer) as the draft model."""

    name = DrafterKind.EARLY_EXIT.value

    def __init__(self, target: PreTrainedModel, layers: int | None = None, confidence: float = 0.0):
        super().__init__(early_exit_model(target, layers or default_exit_layer(target)), confidence)
