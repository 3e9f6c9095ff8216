"""The classic setup: a small causal LM drafts k tokens, one forward each, with its own KV cache."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from transformers import PreTrainedModel

from playground.core.config import DrafterKind
from playground.decoding.chain import ChainDraft
from playground.core.draft import Draft, Drafter
from playground.engine.cache import crop_cache, draft_cache, kept_bytes
from playground.decoding.vocab import SubsetHead
from playground.kernels.step import LeanForward, why_not as lean_why_not
from playground.core.config import SamplingParams
from playground.engine.sampling import choose, wide


# The prompt as a draft model reads it: its first HEAD tokens (the system prompt, the request, the opening of what it
# is about) and its last TAIL (the newest lines and the chat template's turn), one contiguous context at positions
# 0, 1, ... of its own cache. A draft's tokens change only the speed, never the output (the target verifies them), so a
# long prompt's draft pass needs only what predicts the answer; the whole prompt's pass would cost the target's prompt
# pass times the draft's share of the multiply-adds. Head-heavy, as measured (docs/levers.md, "The draft's prompt
# window"). None: the whole prompt (window(None): an A/B, bench --ttft-draft-ab, scripts/draft_window.py).
WINDOW: tuple[int, int] | None = (448, 64)


@contextlib.contextmanager
def window(head_tail: tuple[int, int] | None) -> Iterator[None]:
    """WINDOW set to head_tail (None: drafts read the whole prompt) for the block's duration (for drafts begun in it)."""
    global WINDOW
    previous, WINDOW = WINDOW, head_tail
    try:
        yield
    finally:
        WINDOW = previous


def skipped_span(length: int, head_tail: tuple[int, int] | None) -> tuple[int, int]:
    """(start, n): the positions start .. start + n - 1 of a prompt of `length` tokens that a draft does not read."""
    if head_tail is None or length <= sum(head_tail):
        return 0, 0
    head, tail = head_tail
    return head, length - head - tail


class ModelDrafter(Drafter):
    """A draft model on its own KV cache. confidence > 0 stops a draft early when the draft's top probability
    falls under it (the draft is likely to be rejected there anyway). vocab > 0: the draft proposes from its
    `vocab` most frequent tokens and the sequence's own (decoding/vocab.py; lossless, a cheaper head)."""

    name = DrafterKind.DRAFT_MODEL.value
    lean = True  # chains on the lean forward (kernels/step.py) where it applies; HF's path otherwise

    def __init__(self, model: PreTrainedModel, confidence: float = 0.0, vocab: int = 0):
        self.model = model
        self.confidence = confidence
        self.head = SubsetHead(model, vocab) if vocab else None
        self.reset()

    def reset(self) -> None:
        if self.head is not None:
            self.head.reset()
        self._cache, self._lean = None, None
        if self.lean and lean_why_not(self.model) is None:  # asked each time: a run may switch the kernels
            if getattr(self, "_forward", None) is None:
                self._forward = LeanForward(self.model, wide=True)  # its buffers, kept across resets; a long
                # prompt's pass on torch's matmul (kernels/wide.py: a draft needs determinism, not batch invariance)
            self._lean = self._forward
            self._lean.reset()
        else:
            self._cache = draft_cache(self.model)
        self.cached = 0  # positions of the draft's context (context()) held in the cache
        self.proposal_start = 0
        self.skip = (0, 0)  # the prompt's span that the draft does not read (skipped_span), set by its first draft

    @property
    def skipped(self) -> int:
        """How many positions of the sequence are not in the draft's context (its positions are the sequence's less
        these after the skipped span)."""
        return self.skip[1]

    def context(self, ids: torch.Tensor) -> torch.Tensor:
        """The sequence ids (1, L) as the draft reads it: without the prompt's skipped span (WINDOW), which the first
        draft after a reset sets from the prompt's length."""
        if self.cached == 0:
            self.skip = skipped_span(ids.shape[1], WINDOW)
        start, n = self.skip
        return ids if n == 0 else torch.cat([ids[:, :start], ids[:, start + n :]], dim=1)

    @torch.inference_mode()
    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        if k == 0:
            self.proposal_start = self.cached  # nothing proposed: observe() keeps the cache as it is
            return ChainDraft(ids.new_empty(0), None)
        if self.head is not None:
            self.head.add(ids)
        ids = self.context(ids)
        length = ids.shape[1]
        feed = ids[:, self.cached :]
        tokens, logits = [], []
        for _ in range(k):
            step_logits = self._logits(feed)
            token = choose(step_logits, params, generator)
            tokens.append(token)
            logits.append(step_logits)
            feed = token.view(1, 1)
            if self.confidence > 0 and len(tokens) < k:
                top = torch.softmax(wide(step_logits), -1).max()
                if top.item() < self.confidence:  # a host sync, only when the threshold is on
                    break
        # The cache now holds the sequence plus all proposed tokens but the last.
        self.cached = length + len(tokens) - 1
        self.proposal_start = length
        return ChainDraft(torch.stack(tokens), torch.stack(logits))

    @property
    def lean_forward(self) -> LeanForward | None:
        """The lean forward the drafter runs on (None: HF's path), for a token tree's draft passes (decoding/tree.py)."""
        return self._lean

    @property
    def cache(self):
        """The draft's KV cache as HF's DynamicCache. A drafter on the lean forward hands its keys and values over
        and goes on along HF's path until reset (trees and staged drafts use the cache with HF's model)."""
        if self._cache is None:
            self._cache, self._lean = self._lean.to_dynamic(), None
        return self._cache

    @cache.setter
    def cache(self, cache) -> None:
        self._cache, self._lean = cache, None

    def nbytes(self) -> int:
        """Its KV cache: HF's, and the lean forward's buffers (kept across resets, even once handed over)."""
        lean = getattr(self, "_forward", None)
        return kept_bytes(self._cache) + (kept_bytes(lean) if lean is not None else 0)

    def _logits(self, feed: torch.Tensor) -> torch.Tensor:
        """The draft's logits after `feed` (its cache extended by it): the whole head's, or the subset's."""
        if self._lean is not None and feed.shape[0] == 1:
            if self.head is None:
                return self._lean(feed)
            return self.head.full_logits(self._lean(feed, logits=False))
        if self.head is None:
            return self.model(input_ids=feed, cache=self.cache, use_cache=True, logits_to_keep=1).logits[0, -1]
        hidden = self.model.model(input_ids=feed, cache=self.cache, use_cache=True).last_hidden_state[0, -1]
        return self.head.full_logits(hidden)

    def observe(self, num_accepted: int) -> None:
        keep = min(self.cached, self.proposal_start + num_accepted)
        if self._lean is not None:
            self._lean.crop(keep)
        else:
            crop_cache(self.cache, keep)
        self.cached = keep
