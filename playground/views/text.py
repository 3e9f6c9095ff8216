"""Token text as the views write it: a token's text in its context, escaped for HTML with visible line breaks, and
a probability to three decimals. Pure: every view that shows model text goes through escape_text."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Sequence

from playground.core.numbers import fmt

if TYPE_CHECKING:  # a view never imports transformers: the tokenizer is passed in
    from transformers import PreTrainedTokenizerBase

_CONTEXT = 6  # tokens of left context used to decode one token's text


def piece_text(tokenizer: PreTrainedTokenizerBase, context: Sequence[int], token: int) -> str:
    """The text `token` adds after `context` (byte-level tokenizers need the left context to
    decode spaces and multi-byte characters right). An incomplete character decodes as ''."""
    tail = list(context[-_CONTEXT:])
    before = tokenizer.decode(tail, skip_special_tokens=False).rstrip("\ufffd") if tail else ""
    after = tokenizer.decode(tail + [token], skip_special_tokens=False)
    if after.startswith(before):
        text = after[len(before) :]
    else:  # the tokenizer merged across the boundary: fall back to the token alone
        text = tokenizer.decode([token], skip_special_tokens=False)
    return text.rstrip("\ufffd")  # an incomplete character: the token that completes it shows it


def escape_text(text: str) -> str:
    """HTML-escaped token text with visible line breaks (a ↵ mark, then the real newline)."""
    return html.escape(text, quote=True).replace("\n", '<span class="tok-nl">↵</span>\n')


def num(x: float | None) -> str:
    """A probability as the views write it: three decimals, "n/a" when not recorded."""
    return fmt(None if x is None else float(x), 3, missing="n/a")
