"""The tokenizer's answers, recorded and replayed: a run's views ask its tokenizer for the text of tokens; the
Run tab records those answers into the trace (`decoded`), and a recorded run (recorded.py) answers the same
questions from that table with no model loaded. Pure: no torch, transformers or gradio."""

from __future__ import annotations

import sys
from typing import Any

from playground.core.sizes import plain_bytes


class RecordingTokenizer:
    """A tokenizer that remembers every decode the views ask of it (the table goes into the trace)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer, self.answers = tokenizer, {}  # answers: {(ids, skip_special_tokens): text}
        self._bytes = 0  # of the answers' keys and texts, added as they come

    def decode(self, ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        key = (tuple(int(i) for i in ids), bool(skip_special_tokens))
        if key not in self.answers:
            text = self.answers[key] = self._tokenizer.decode(list(key[0]), skip_special_tokens=key[1], **kwargs)
            # ids that are ints already are the caller's (the run's records'): int() gave the same objects back
            shared = all(type(i) is int for i in ids)
            self._bytes += (
                sys.getsizeof(key) + (sys.getsizeof(key[0]) if shared else plain_bytes(key)) + plain_bytes(text)
            )
        return self.answers[key]

    def nbytes(self) -> int:
        """Bytes of the texts it remembers (the shared tokenizer's not), counted as they came."""
        return self._bytes + sys.getsizeof(self.answers)

    def table(self) -> list:
        """[[ids, skip_special_tokens, text], ...]: the trace's `decoded`."""
        return [[list(ids), skip, text] for (ids, skip), text in self.answers.items()]

    def __getattr__(self, name: str) -> Any:  # everything else is the real tokenizer's
        return getattr(self._tokenizer, name)


class ReplayTokenizer:
    """Answers decode() from a recorded table; a question it was never asked gets each token's own recorded text
    (or its id in brackets), so a view never fails on it."""

    def __init__(self, answers: dict[tuple[tuple[int, ...], bool], str]) -> None:
        self.answers = answers
        self._bytes: int | None = None  # the table's, counted once: it never changes

    def nbytes(self) -> int:
        if self._bytes is None:
            self._bytes = plain_bytes(self.answers)
        return self._bytes

    def decode(self, ids: Any, skip_special_tokens: bool = False, **_: Any) -> str:
        key = (tuple(int(i) for i in ids), bool(skip_special_tokens))
        if key in self.answers:
            return self.answers[key]
        return "".join(self.answers.get(((i,), key[1]), self.answers.get(((i,), False), f"[{i}]")) for i in key[0])

    def table(self) -> list:
        return [[list(ids), skip, text] for (ids, skip), text in self.answers.items()]


def decoded_table(tokenizer: Any) -> list | None:
    """The table to write into a trace, when the run's tokenizer kept one."""
    return tokenizer.table() if isinstance(tokenizer, (RecordingTokenizer, ReplayTokenizer)) else None
