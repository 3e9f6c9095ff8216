"""The target's cache of a prompt kept for its next runs: the example prompt that a newcomer's first click sends.

The start-up prefills the page's first example prompt once (Session.keep_prefix); a decoder built later for the same
prompt ids on the same target starts from a copy of that cache instead of prefilling the prompt in its first round
(its record's `prefill` then counts 0 tokens). Only where the target runs the batch-invariant kernels: there a row's
keys and values are the same bits whether the prompt is fed alone, with the first round's draft tokens, or in chunks
(tests/test_kernels.py), so the run decides every token as it would have. Only the Run tab's sessions ask for it
(Runner.session(prefix=True)), on both sides of its comparison with the target alone; the benchmark, Compare pairs
(whose peers prefill) and other prompts prefill as before. At most KEEP prompts per target (a prompt's keys and
values: a few MB for the default pair)."""

from __future__ import annotations

import copy
import weakref

import torch
from transformers import DynamicCache, PreTrainedModel

KEEP = 4


class Prefixes:
    def __init__(self) -> None:
        self._kept: weakref.WeakKeyDictionary[PreTrainedModel, dict[tuple[int, ...], DynamicCache]] = (
            weakref.WeakKeyDictionary()
        )

    @torch.inference_mode()
    def keep(self, target: PreTrainedModel, ids: torch.Tensor) -> None:
        """Prefill every token of the prompt ids (1, L) but the last, and keep the cache (the oldest of KEEP goes)."""
        key = tuple(ids[0].tolist())
        kept = self._kept.setdefault(target, {})
        if key in kept or ids.shape[1] < 2:
            return
        cache = DynamicCache(config=target.config)
        target(input_ids=ids[:, :-1].to(target.device), cache=cache, use_cache=True, logits_to_keep=1)
        kept[key] = cache
        while len(kept) > KEEP:
            kept.pop(next(iter(kept)))

    def find(self, target: PreTrainedModel, ids: torch.Tensor) -> DynamicCache | None:
        """A copy of the kept cache of exactly these prompt ids (the decoder extends and crops its own), or None."""
        kept = self._kept.get(target, {}).get(tuple(ids[0].tolist()))
        return copy.deepcopy(kept) if kept is not None else None
