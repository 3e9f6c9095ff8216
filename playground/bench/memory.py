"""Memory, before anything is allocated: what a challenge run needs (KV caches and the largest pass) against what
is left beside the models' weights, and the context window; a run that would not fit is refused with a message."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from playground import models
from playground.core.errors import PlaygroundError
from playground.models import LoadedPair
from playground.models.cache import model_bytes


def kv_bytes_per_token(model: torch.nn.Module) -> int:
    """Bytes one token takes in a model's KV cache: keys and values of every layer, in the activations' dtype."""
    c = model.config
    heads = c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    return 2 * c.num_hidden_layers * kv_heads * head_dim * model.get_input_embeddings().weight.element_size()


@dataclass(frozen=True)
class MemoryNeed:
    kv: int  # both KV caches at their largest (padding and holes included)
    prompt_pass: int  # the largest pass's transient tensors: attention scores and mask, the MLP's activations

    @property
    def total(self) -> int:
        return self.kv + self.prompt_pass


def memory_need(pair: LoadedPair, rows: int, prompt_len: int, max_new_tokens: int, k: int) -> MemoryNeed:
    """An upper bound for a run of `rows` sequences of up to prompt_len tokens: the KV columns can grow by k + 1
    per round when rows accept different numbers of tokens (batch.py's holes), so rows x (prompt + N (k + 1))."""
    columns = prompt_len + max_new_tokens * (k + 1) if rows > 1 else prompt_len + max_new_tokens + k
    models_ = [m for m in (pair.target, pair.draft if k else None) if m is not None]
    kv = rows * columns * sum(kv_bytes_per_token(m) for m in models_)
    width = prompt_len + k
    prompt_pass = max(
        rows * width * (m.config.num_attention_heads * (width + k) * 4 + 3 * 4 * m.config.intermediate_size)
        + rows * width * (width + k) * 4
        for m in models_
    )
    return MemoryNeed(kv, prompt_pass)


def memory_left(pair: LoadedPair) -> int:
    """Bytes a run may allocate: the budget (models.memory_budget) less the pair's weights, and no more than
    the device has free now."""
    weights = model_bytes(pair.target) + (model_bytes(pair.draft) if pair.draft is not None else 0)
    if pair.target.device.type == "cuda":
        free = torch.cuda.mem_get_info(pair.target.device)[0]
    else:
        import psutil

        free = psutil.virtual_memory().available
    return min(models.memory_budget() - weights, free)


def check_memory(need: MemoryNeed, left: int, what: str) -> None:
    if need.total > left:
        gb = lambda b: f"{b / 2**30:.2f} GB"
        raise PlaygroundError(
            f"{what} would not fit: it needs about {gb(need.total)} ({gb(need.kv)} of KV cache, "
            f"{gb(need.prompt_pass)} for the prompt pass) and {gb(max(0, left))} is left beside the "
            f"models' weights. Choose a smaller size, or raise PLAYGROUND_MEMORY_GB."
        )


def check_window(pair: LoadedPair, tokens: int, what: str) -> None:
    for model in (pair.target, pair.draft):
        window = getattr(model.config, "max_position_embeddings", None) if model is not None else None
        if window and tokens > window:
            raise PlaygroundError(f"{what} needs {tokens} positions; the model's context window is {window} tokens.")
