"""Glue shared by the UI, the benchmark and the tests: prompt -> ids, drafter by name,
a decoder ready to run. No decoding here: that is engine.SpeculativeDecoder."""
from __future__ import annotations

import os

import torch
from transformers import PreTrainedTokenizerBase

from playground.drafters import Drafter, ModelDrafter, NoDrafter, PromptLookupDrafter, default_exit_layer, early_exit_model
from playground.engine import DecodeConfig, SpeculativeDecoder
from playground.errors import PlaygroundError
from playground.models import LoadedPair
from playground.speed import DRAFT_PRECISIONS, draft_variant

DRAFT_MODEL, PROMPT_LOOKUP, EARLY_EXIT, TARGET_ALONE = "draft model", "prompt lookup", "early exit", "target alone"
DRAFTERS = (DRAFT_MODEL, PROMPT_LOOKUP, EARLY_EXIT)
MAX_PROMPT_CHARS = int(os.environ.get("PLAYGROUND_MAX_PROMPT_CHARS", 20_000))


def default_precision(pair: LoadedPair) -> str:
    """The draft precision the app and the benchmark use by default: int8 on CPU (measured 1.1-1.3x
    faster end to end than fp32 there, docs/benchmarks.md), the loaded dtype on GPU.
    $PLAYGROUND_DRAFT_PRECISION overrides."""
    env = os.environ.get("PLAYGROUND_DRAFT_PRECISION")
    if env:
        return env
    return "int8" if pair.target.device.type == "cpu" else "fp32"


def make_drafter(kind: str, pair: LoadedPair, confidence: float = 0.0, precision: str | None = None,
                 exit_layer: int | None = None) -> Drafter:
    """precision: the draft model's ("fp32", "bf16", "int8"; see playground.speed); None = default_precision.
    exit_layer: how many of the target's layers the early-exit drafter runs; None or 0 = default_exit_layer."""
    precision = precision or default_precision(pair)
    if precision not in DRAFT_PRECISIONS:
        raise PlaygroundError(f"Draft precision must be one of {', '.join(DRAFT_PRECISIONS)}, got {precision!r}.")
    if kind == DRAFT_MODEL:
        if pair.draft is None:
            raise PlaygroundError("The 'draft model' drafter needs a pair with a draft model.")
        return ModelDrafter(draft_variant(pair.draft, precision), confidence)
    if kind == PROMPT_LOOKUP:
        return PromptLookupDrafter()
    if kind == EARLY_EXIT:  # shares the target's weights: full precision, no copy
        drafter = ModelDrafter(early_exit_model(pair.target, exit_layer or default_exit_layer(pair.target)), confidence)
        drafter.name = EARLY_EXIT
        return drafter
    if kind == TARGET_ALONE:
        return NoDrafter()
    raise PlaygroundError(f"Unknown drafter {kind!r}; choose one of: {', '.join(DRAFTERS + (TARGET_ALONE,))}.")


def check_prompt(prompt: object) -> str:
    """A prompt the models can take (not empty, not over MAX_PROMPT_CHARS), else a clear error."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise PlaygroundError("The prompt is empty: type something to continue.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise PlaygroundError(f"The prompt is too long ({len(prompt)} characters; the limit is {MAX_PROMPT_CHARS}).")
    return prompt


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, chat: bool = True) -> torch.Tensor:
    """The prompt as ids (1, L). Instruct models with a chat template get it applied
    (one user turn), others see the raw text."""
    check_prompt(prompt)
    if chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
    else:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
    if ids.shape[1] == 0:
        raise PlaygroundError("The prompt encodes to no tokens: type something else.")
    return ids


def decoder(pair: LoadedPair, kind: str, prompt: str, config: DecodeConfig, chat: bool = True,
            confidence: float = 0.0, precision: str | None = None, exit_layer: int | None = None) -> SpeculativeDecoder:
    """A ready-to-run decoder for one prompt; iterate it for the round records."""
    config.validate()
    ids = encode_prompt(pair.tokenizer, prompt, chat)
    drafter = make_drafter(kind, pair, confidence, precision, exit_layer)
    return SpeculativeDecoder(pair.target, drafter, ids, config, pair.eos)
