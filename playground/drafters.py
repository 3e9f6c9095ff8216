"""Draft sources behind one small protocol.

A drafter proposes up to k tokens after the current sequence and is told how many the
target kept. Like transformers' candidate generators (get_candidates /
update_candidate_strategy), but two methods and a reset.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Protocol

import torch
from transformers import DynamicCache, PreTrainedModel

from playground.errors import PlaygroundError
from playground.sampling import SamplingParams, choose


@dataclass
class Draft:
    tokens: torch.Tensor  # (k',) long, k' <= k (a drafter may stop early)
    logits: torch.Tensor | None  # (k', V) raw draft logits, None for a deterministic drafter


class Drafter(Protocol):
    name: str

    def reset(self) -> None:
        """Forget everything: a new sequence starts."""

    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        """Up to k tokens to follow ids (1, L)."""

    def observe(self, num_accepted: int) -> None:
        """The target kept the first num_accepted tokens of the last proposal."""

    # Optional: annotate(record) adds the drafter's own view of the round to its RoundRecord (the
    # cross-tokenizer drafter's draft-side text; the runner's decoder calls it after each step).


def draft_cache(model: PreTrainedModel) -> DynamicCache:
    """A KV cache a drafter can crop back anywhere: full layers for attention models, even those with
    sliding-window layers (Gemma 3, Mistral), whose own cache layers cannot be cropped once past their
    window; the model's mask applies the window. Other layer kinds (linear attention, Mamba) get the
    model's own cache."""
    kinds = set(getattr(model.config, "layer_types", None) or ())
    if kinds <= {"full_attention", "sliding_attention"}:
        return DynamicCache()
    return DynamicCache(config=model.config)


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Cut a KV cache back to its first `length` positions."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


class ModelDrafter:
    """The classic setup: a small causal LM drafts k tokens, one forward each, with its own KV cache.

    confidence > 0 stops a draft early when the draft's top probability falls under it
    (the draft is likely to be rejected there anyway).
    """

    def __init__(self, model: PreTrainedModel, confidence: float = 0.0):
        self.model = model
        self.name = "draft model"
        self.confidence = confidence
        self.reset()

    def reset(self) -> None:
        self.cache = draft_cache(self.model)
        self.cached = 0  # positions of the sequence held in the cache
        self.proposal_start = 0

    @torch.inference_mode()
    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        if k == 0:
            self.proposal_start = self.cached  # nothing proposed: observe() keeps the cache as it is
            return Draft(ids.new_empty(0), None)
        length = ids.shape[1]
        feed = ids[:, self.cached :]
        tokens, logits = [], []
        for _ in range(k):
            out = self.model(input_ids=feed, cache=self.cache, use_cache=True, logits_to_keep=1)
            step_logits = out.logits[0, -1]
            token = choose(step_logits, params, generator)
            tokens.append(token)
            logits.append(step_logits)
            feed = token.view(1, 1)
            if self.confidence > 0 and len(tokens) < k:
                top = torch.softmax(step_logits.float(), -1).max()
                if top.item() < self.confidence:  # a host sync, only when the threshold is on
                    break
        # The cache now holds the sequence plus all proposed tokens but the last.
        self.cached = length + len(tokens) - 1
        self.proposal_start = length
        return Draft(torch.stack(tokens), torch.stack(logits))

    def observe(self, num_accepted: int) -> None:
        keep = min(self.cached, self.proposal_start + num_accepted)
        crop_cache(self.cache, keep)
        self.cached = keep


def early_exit_model(target: PreTrainedModel, layers: int) -> PreTrainedModel:
    """The target's first `layers` decoder layers, its final norm and its own LM head, as a model
    of its own that shares every weight with the target (no copy): a self-speculative draft
    (early exit, as in LayerSkip). Decoders of the Llama / Qwen / Mistral family only: those run
    `self.layers[: config.num_hidden_layers]`, so a config with fewer layers is all it takes."""
    inner = getattr(target, "model", None)
    total = target.config.num_hidden_layers
    if inner is None or not hasattr(inner, "layers"):
        raise PlaygroundError(f"The early-exit drafter needs a Llama / Qwen / Mistral style decoder "
                              f"(model.layers); {type(target).__name__} is not one.")
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers < total:
        raise PlaygroundError(f"The early-exit layer must be a whole number from 1 to {total - 1} for this "
                              f"target ({total} layers), got {layers!r}.")
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
    return max(1, target.config.num_hidden_layers // 4)


class PromptLookupDrafter:
    """No second model: find the latest earlier occurrence of the sequence's last n-gram
    and propose the tokens that followed it (Saxena 2023, "prompt lookup decoding").

    Deterministic, so the acceptance rule treats p as one-hot on each proposed token.
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        self.name = "prompt lookup"
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def reset(self) -> None:
        pass

    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        seq = ids[0].tolist()
        return Draft(torch.tensor(lookup(seq, k, self.max_ngram, self.min_ngram), dtype=torch.long, device=ids.device), None)

    def observe(self, num_accepted: int) -> None:
        pass


def lookup(seq: list[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Up to k tokens that followed the latest earlier match of seq's final n-gram (longest n first)."""
    if k <= 0:
        return []
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        tail = seq[-n:]
        for start in range(len(seq) - n - 1, -1, -1):
            if seq[start : start + n] == tail:
                follow = seq[start + n : start + n + k]
                if follow:
                    return follow
    return []


class NoDrafter:
    """Proposes nothing: every round is one plain target step. This is the autoregressive
    baseline, run through the same loop and instrumentation as speculative decoding."""

    name = "target alone"

    def reset(self) -> None:
        pass

    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        return Draft(ids.new_empty(0), None)

    def observe(self, num_accepted: int) -> None:
        pass
