"""Drafting with a model whose tokenizer is not the target's: the two sides meet in text.

Each round the drafter decodes what the target has generated so far to text, re-encodes it with the
draft's tokenizer after the prompt (below), drafts up to k draft-side tokens greedily,
decodes them to text and re-encodes that text with the target's tokenizer after the target's own last
tokens. The target then verifies the translated tokens like any other draft.

Lossless by construction: the proposal is handed to the engine as a deterministic draft (Draft.logits
is None, as for prompt lookup), so the acceptance rule takes p one-hot on each proposed token: accept x
with probability q(x), else draw from norm(max(0, q - onehot(x))) = q without x, which gives each
token exactly q whatever x was (docs/cross-tokenizer.md). Greedy, the target keeps only
its own argmax. A bad translation costs speed, never correctness.

Text round trips are not exact, so:
- the draft's context: the target's prompt as text (its chat template included, as transformers' universal
  assisted decoding gives it) re-encoded, when the draft reads the target's chat format (every special
  token of the target's prompt is one special token of the draft's: Qwen and SmolLM2 both speak ChatML);
  else the prompt in the draft's own chat template (or raw, for a draft without one, like the Gemma 3
  270M base model), which the runner passes as draft_prompt. Then the generated text re-encoded whole,
  joined to the prompt's last token (unless special) so that they merge as the draft would write them.
  (A draft that reads ChatML accepts more with the target's text than with its own template; one that
  does not reads ChatML markers as plain text: docs/cross-tokenizer.md has the measurements.)
- a draft is at most k draft-side steps, as transformers' (num_assistant_tokens = k), and stops
  earlier once its text gives k target tokens (a longer budget pays draft steps for proposals that are
  mostly rejected where the draft's tokens are finer than the target's);
- the draft's text is what decoding (context tail + draft tokens) adds to decoding the context tail
  alone (decoders that drop a leading space or merge bytes see the same context either way);
- the target tokens are those of (target tail text + draft text) after the tail's own tokens, used
  only where the tail re-encodes to exactly its own tokens (a stable prefix); otherwise the draft text
  is encoded on its own;
- a character cut in two (a trailing U+FFFD) is held back until it is complete, on both sides;
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from playground.core.config import DrafterKind
from playground.decoding.chain import ChainDraft
from playground.core.draft import Draft, Drafter
from playground.engine.cache import crop_cache, draft_cache, kept_bytes
from playground.core.records import CrossExtras, RoundRecord
from playground.core.sizes import plain_bytes
from playground.core.config import SamplingParams

TAIL = 8  # target-side tokens re-encoded with the proposal (the stable-prefix check)
BROKEN = "\ufffd"  # what decoding shows for a character cut between tokens


def decode(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False).input_ids if text else []


def continuation(tokenizer: PreTrainedTokenizerBase, context: list[int], new: list[int]) -> str:
    """The text `new` adds after `context` (both token ids of one tokenizer)."""
    base, full = decode(tokenizer, context), decode(tokenizer, context + new)
    return full[len(base) :] if full.startswith(base) else decode(tokenizer, new)


def to_target(tokenizer: PreTrainedTokenizerBase, seq: list[int], text: str, tail: int = TAIL) -> list[int]:
    """Target tokens for `text` following the target sequence `seq`: the tokens of (tail text + text)
    after the tail's own tokens where the tail re-encodes to itself (a stable prefix), else `text`
    encoded on its own. The last token may be an incomplete merge: the caller decides."""
    if not text:
        return []
    start = max(0, len(seq) - tail)
    while start > 0 and decode(tokenizer, seq[start : start + 1]).startswith(BROKEN):
        start -= 1  # do not start inside a character
    own = seq[start:]
    ids = encode(tokenizer, decode(tokenizer, own) + text)
    if ids[: len(own)] == own and len(ids) > len(own):
        return ids[len(own) :]
    return encode(tokenizer, text)


def spans(tokenizer: PreTrainedTokenizerBase, context: list[int], new: list[int]) -> list[tuple[int, int]]:
    """(start, end) character offsets of each token of `new` in continuation(context, new)."""
    ends = [len(continuation(tokenizer, context, new[: i + 1])) for i in range(len(new))]
    return [(ends[i - 1] if i else 0, e) for i, e in enumerate(ends)]


def _is_special(tokenizer: PreTrainedTokenizerBase, token: int) -> bool:
    added = tokenizer.added_tokens_decoder.get(token)
    return added is not None and added.special


def reads_chat_format(target_tok: PreTrainedTokenizerBase, draft_tok: PreTrainedTokenizerBase, seq: list[int]) -> bool:
    """Whether the draft reads the target's chat format: every special token of `seq` (the target's
    prompt) is, as text, one special token of the draft's."""
    for token in {t for t in seq if _is_special(target_tok, t)}:
        ids = encode(draft_tok, decode(target_tok, [token]))
        if len(ids) != 1 or not _is_special(draft_tok, ids[0]):
            return False
    return True


@dataclass
class CrossRound:
    """The draft side of one round, for the record and the tests."""

    anchor: list[int] = field(default_factory=list)  # the draft-side context's last tokens
    draft_ids: list[int] = field(default_factory=list)  # the draft's own tokens
    pieces: list[str] = field(default_factory=list)  # each as the text it added
    text: str = ""  # the text the proposal was translated from
    source_idx: list[list[int]] = field(
        default_factory=list
    )  # per proposed target token: the draft tokens it came from
    source: list[str] = field(default_factory=list)  # the same, as the text of those draft pieces
    logits: torch.Tensor | None = None  # (steps, V_draft) the draft's logits at each step (not used by the rule)


class CrossTokenizerDrafter(Drafter):
    """A draft model with its own tokenizer: draft in the draft's tokens, translate through text,
    propose target tokens as a deterministic draft (p one-hot: lossless; see the module docstring).

    draft_prompt: the prompt in the draft's own encoding (its chat template), the context when the draft
    does not read the target's chat format (reads_chat_format); None = always the target's prompt,
    chat template included, decoded to text and re-encoded.
    The draft drafts greedily whatever the sampling settings: with p one-hot a token x is kept with probability
    q(x), so the draft's likeliest guess is the best it can offer.
    """

    name = DrafterKind.CROSS_TOKENIZER.value

    def __init__(
        self,
        model: PreTrainedModel,
        draft_tokenizer: PreTrainedTokenizerBase,
        target_tokenizer: PreTrainedTokenizerBase,
        draft_prompt: list[int] | None = None,
    ):
        self.model, self.draft_tok, self.target_tok = model, draft_tokenizer, target_tokenizer
        self.draft_prompt = list(draft_prompt) if draft_prompt is not None else None
        eos = model.generation_config.eos_token_id
        self.draft_eos = ({eos} if isinstance(eos, int) else set(eos or ())) | (
            {draft_tokenizer.eos_token_id} if draft_tokenizer.eos_token_id is not None else set()
        )
        self.draft_special = set(draft_tokenizer.all_special_ids)
        self.reset()

    def reset(self) -> None:
        # Croppable anywhere, also for Gemma 3's 512-token sliding window: each round crops back to where
        # the re-encoded text first differs (cache.draft_cache).
        self.cache = draft_cache(self.model)
        self.cached: list[int] = []  # the draft-side tokens whose keys and values the cache holds
        self.prompt_len: int | None = None  # the target's prompt length, learnt at the first proposal
        self.prompt: list[int] = []  # the draft-side prompt
        self.last = CrossRound()

    def nbytes(self) -> int:
        """Its KV cache and the draft-side tokens it keeps."""
        return kept_bytes(self.cache) + plain_bytes([self.cached, self.prompt, self.draft_prompt])

    @torch.inference_mode()
    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        seq = ids[0].tolist()
        if self.prompt_len is None:
            self.prompt_len = len(seq)
            own = self.draft_prompt is not None and not reads_chat_format(self.target_tok, self.draft_tok, seq)
            self.prompt = self.draft_prompt if own else encode(self.draft_tok, decode(self.target_tok, seq))
        self.last = CrossRound()
        none = ChainDraft(ids.new_empty(0), None)
        text = decode(self.target_tok, seq[self.prompt_len :])
        if k == 0 or text.endswith(BROKEN):  # nothing asked, or the target is inside a character: wait
            return none
        # The generated text in the draft's tokens, joined to the prompt's last token (unless special) so
        # that they merge as the draft would have written them.
        head = self.prompt[:-1] if self.prompt and self.prompt[-1] not in self.draft_special else self.prompt
        generated = encode(self.draft_tok, continuation(self.draft_tok, head[-TAIL:], self.prompt[len(head) :]) + text)
        context = head + generated
        anchor = context[-TAIL:]
        tokens = self._draft(context, anchor, seq, k)
        self.last.text = continuation(self.draft_tok, anchor, tokens).rstrip(BROKEN)
        keep = to_target(self.target_tok, seq, self.last.text)[:k]
        self.last.anchor = anchor
        self._describe(anchor, tokens, seq, keep)
        return ChainDraft(torch.tensor(keep, dtype=torch.long, device=ids.device), None)

    def _draft(self, context: list[int], anchor: list[int], seq: list[int], k: int) -> list[int]:
        """Greedy draft-side tokens after `context` until their text gives k target tokens, the draft's EOS,
        or k steps."""
        feed = self._reuse(context)
        tokens, logits = [], []
        for _ in range(k):
            out = self.model(
                input_ids=torch.tensor([feed], device=self.model.device),
                cache=self.cache,
                use_cache=True,
                logits_to_keep=1,
            )
            self.cached += feed
            logits.append(out.logits[0, -1])
            token = int(logits[-1].argmax())  # the one host sync per draft step
            if token in self.draft_eos:
                break
            tokens.append(token)
            feed = [token]
            text = continuation(self.draft_tok, anchor, tokens)
            if len(to_target(self.target_tok, seq, text.rstrip(BROKEN))) >= k:
                break
        self.last.logits = torch.stack(logits)
        return tokens

    def _reuse(self, context: list[int]) -> list[int]:
        """Keep the cache for the longest common prefix of what it holds and `context`; return the rest
        to feed (at least one token)."""
        common = 0
        for a, b in zip(self.cached, context):
            if a != b:
                break
            common += 1
        common = min(common, len(context) - 1)
        crop_cache(self.cache, common)
        self.cached = self.cached[:common]
        return context[common:]

    def _describe(self, anchor: list[int], tokens: list[int], seq: list[int], keep: list[int]) -> None:
        """The draft side, for the record: each draft token as the text it added, and for each proposed
        target token the draft pieces whose text overlaps it."""
        full = continuation(self.draft_tok, anchor, tokens)
        draft_spans = spans(self.draft_tok, anchor, tokens)
        self.last.draft_ids = tokens
        self.last.pieces = [full[a:b] for a, b in draft_spans]
        self.last.source_idx = [
            [j for j, (a, b) in enumerate(draft_spans) if a < te and b > ts]
            for ts, te in spans(self.target_tok, seq[-TAIL:], keep)
        ]
        self.last.source = ["".join(self.last.pieces[j] for j in idx) for idx in self.last.source_idx]

    def annotate(self, record: RoundRecord) -> None:
        """Add the draft side of this round to its record. (No observe(): the next proposal re-encodes the
        text and reuses the cache's common prefix.)"""
        record.extras = CrossExtras(self.last.text, list(self.last.pieces), list(self.last.source))
