"""The peer: Hugging Face transformers `generate` on the very same loaded models, with the arguments the
registry's one builder gives for our strategy (decoding.hf_generate, the export's too).

- "hf target alone": the target's own greedy / sampling loop.
- "hf assisted (same draft)": `assistant_model=pair.draft`, the very draft object our engine drafts
  with (same weights, same precision, e.g. int8-quantised), the same target object, with
  num_assistant_tokens = k, schedule "constant" ("heuristic" when our k policy is the heuristic one)
  and assistant_confidence_threshold = 0 (no early stop of a draft): the same algorithm as ours.
- "hf assisted (same draft, confidence)": the peer of our draft-confidence k policy: the same draft object,
  num_assistant_tokens = k, schedule "constant", assistant_confidence_threshold = DecodeConfig.confidence.
- "hf assisted (HF defaults)": the same draft object with transformers' own defaults (below).
- "hf prompt lookup": `prompt_lookup_num_tokens = k`, n-grams up to the same length as ours.
- "hf universal assisted (same draft)": the peer of our cross-tokenizer drafter: the same draft object
  with its own tokenizer (`assistant_model=`, `tokenizer=`, `assistant_tokenizer=`: transformers'
  universal assisted decoding, UniversalSpeculativeDecodingGenerator), k = num_assistant_tokens, schedule
  "constant", no confidence stop, as for the same-tokenizer peer.

transformers 5.x defaults (GenerationConfig._get_default_generation_params, filled in by
AssistedCandidateGenerator where the draft's generation_config leaves a field unset):
num_assistant_tokens = 20, num_assistant_tokens_schedule = "constant",
assistant_confidence_threshold = 0.4 (a draft stops early once the draft's top probability falls
under it; the threshold is re-fitted during a run from an ROC curve only when scikit-learn is installed).

The draft's generation_config is shared with the rest of the app: every field changed here is put
back afterwards, even when generate raises (the "heuristic" schedule writes its final
num_assistant_tokens back into it). HF runs on the target exactly as ours does: the same object,
the same precision and the same kernels (speed.fast_verify, an fp32-only lever, patches the target
itself, so HF's generate gets it too; `--stock-kernels` turns it off for both).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Iterator

import torch
from transformers import PreTrainedModel

from playground.engine import clock
from playground.models import LoadedPair
from playground.run.runner import WARM_PROMPT, encode_prompt
from playground import decoding
from playground.core.config import DecodeConfig, KPolicy
from playground.run.spec import DrafterSpec
from playground.trace.results import HF_CONFIDENCE, HF_DEFAULTS, HF_PROMPT_LOOKUP
from playground.trace.results import HF_SAME_DRAFT, HF_TARGET_ALONE, HF_UNIVERSAL


ASSISTANT_FIELDS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
DRAFT, DRAFT_TOKENIZER = decoding.HFObject.DRAFT, decoding.HFObject.DRAFT_TOKENIZER


@dataclass(frozen=True)
class HFConfig:
    """One HF configuration: a method (the row's name), what transformers runs for its strategy (configs_for: the
    registry's builder, decoding.hf_generate) and the settings of the model that drafts. k: num_assistant_tokens or
    prompt_lookup_num_tokens (None: HF's defaults)."""

    method: str
    k: int | None = None
    schedule: str = "constant"  # "constant" or "heuristic" (same draft only)
    drafter: Enum = decoding.BASELINE  # our drafter this one corresponds to (the strategy the arguments are of)
    arguments: tuple[tuple[str, object], ...] = ()  # decoding.hf_generate's generate() arguments (none: no drafting)
    drafts: decoding.HFObject | None = None  # the model whose generation_config takes k, the schedule, the threshold
    draft_precision: str = ""  # which draft object (same draft / HF defaults): the one loaded at this precision
    confidence: float = 0.0  # assistant_confidence_threshold (same draft, confidence)

    @property
    def k_label(self) -> str:
        if self.method == HF_DEFAULTS:
            return "hf default"
        if self.k is None:
            return ""
        if self.method == HF_CONFIDENCE:
            return KPolicy.CONFIDENCE.value
        return self.schedule if self.schedule != "constant" else str(self.k)


def configs_for(drafter: DrafterSpec, decode: DecodeConfig, draft_precision: str = "") -> list[HFConfig]:
    """The HF peers of one of our configurations where the bench runs its strategy's transformers peer beside it
    (Strategy.hf.bench; none for a token tree: HF has none), by what transformers runs for it
    (decoding.hf_generate): the pair's draft with its own tokenizer, universal assisted generation; on the target's,
    assisted generation with the same draft (our k and schedule, or under the draft-confidence policy our threshold:
    HF's assistant_confidence_threshold) and with transformers' own defaults; no model but arguments, prompt lookup."""
    if decode.tree is not None or not decoding.strategy(drafter.kind).hf.bench:
        return []
    run = decoding.hf_generate(drafter.kind, drafter.options, decode.k)
    ours = {"drafter": drafter.kind, "arguments": tuple(run.arguments.items()), "drafts": run.drafts}
    if run.drafts is not DRAFT:  # no model drafts: prompt lookup; no arguments either: the target alone's own row
        return [HFConfig(HF_PROMPT_LOOKUP, decode.k, **ours)] if run.drafts is None and run.arguments else []
    ours["draft_precision"] = draft_precision
    if DRAFT_TOKENIZER in run.arguments.values():
        return [HFConfig(HF_UNIVERSAL, decode.k, **ours)]
    if decode.policy is KPolicy.CONFIDENCE:
        same = HFConfig(HF_CONFIDENCE, decode.k, confidence=decode.confidence, **ours)
    else:
        same = HFConfig(
            HF_SAME_DRAFT, decode.k, "heuristic" if decode.policy is KPolicy.HEURISTIC else "constant", **ours
        )
    return [same, HFConfig(HF_DEFAULTS, **ours)]


@contextmanager
def assistant_settings(draft: PreTrainedModel, values: dict) -> Iterator[None]:
    """Set fields of the draft's generation_config for one generate call, then put every one back."""
    config = draft.generation_config
    saved = {name: getattr(config, name, None) for name in values}
    try:
        for name, value in values.items():
            setattr(config, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


def generate(
    pair: LoadedPair, config: HFConfig, prompt: str, decode: DecodeConfig, chat: bool = True
) -> tuple[list[int], float]:
    """One HF generation: (new tokens, wall seconds). The prompt is tokenised exactly as our runner
    does (runner.encode_prompt); the clock covers encoding and generate, as ours covers encoding and
    the rounds."""
    target = pair.target
    kwargs: dict = dict(
        max_new_tokens=decode.max_new_tokens,
        eos_token_id=sorted(pair.eos),
        pad_token_id=pair.tokenizer.pad_token_id if pair.tokenizer.pad_token_id is not None else min(pair.eos),
    )
    if decode.temperature > 0:
        kwargs.update(do_sample=True, temperature=decode.temperature, top_p=decode.top_p, top_k=decode.top_k)
    else:
        kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    objects = {
        decoding.HFObject.DRAFT: pair.draft,
        decoding.HFObject.TARGET: target,
        decoding.HFObject.TOKENIZER: pair.tokenizer,
        decoding.HFObject.DRAFT_TOKENIZER: pair.draft_tokenizer,
    }
    for name, value in config.arguments:
        if isinstance(value, decoding.HFObject) and objects[value] is None:
            raise ValueError(f"{config.method} needs {value.value}")
        kwargs[name] = objects[value] if isinstance(value, decoding.HFObject) else value
    draft = objects[config.drafts] if config.drafts is not None else None
    assistant = {name: None for name in ASSISTANT_FIELDS}  # k None: unset, transformers fills in its defaults
    if config.k is not None:
        assistant = dict(zip(ASSISTANT_FIELDS, (config.k, config.schedule, config.confidence)))
    # The same target object in the same state as ours (its kernels included: --stock-kernels applies to both).
    with assistant_settings(draft, assistant) if draft is not None else _nothing():
        torch.manual_seed(decode.seed)
        start = clock(target.device)
        ids = encode_prompt(pair.tokenizer, prompt, chat).to(target.device)
        with torch.inference_mode():
            out = target.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
        seconds = clock(target.device) - start
    return out[0, ids.shape[1] :].tolist(), seconds


def warm_up(pair: LoadedPair, config: HFConfig, chat: bool = True) -> None:
    """First calls pay one-time costs (kernel selection, allocator growth): keep them out of the numbers."""
    generate(pair, config, WARM_PROMPT, DecodeConfig(max_new_tokens=4, k=2, record=False), chat)


@contextmanager
def _nothing() -> Iterator[None]:
    yield
