"""The error a user can fix, and how a message quotes what the user sent: never in full when it is long, and
never a server path."""

from __future__ import annotations

import re

QUOTE_CHARS = 60  # the most of a user's value a message quotes


class PlaygroundError(ValueError):
    """A problem the user can fix (bad input, a model that cannot load). Its message is shown as is."""


class Ended(PlaygroundError):
    """A job that ended before its end on purpose (Stop, or nobody listens any more): shown as information."""


def shown(value: object, limit: int = QUOTE_CHARS) -> str:
    """A value as a message quotes it: its repr, cut to `limit` characters with the whole length when longer, so
    that a 1 MB input is answered in a line, not echoed back."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value):,} characters" if isinstance(value, str) else f"a {type(value).__name__}"
    return f"{text[:limit]}… ({size})"


# An absolute path (POSIX or Windows) not inside a word or a URL.
_PATH = re.compile(r"(?<![\w.:/\\-])(?:/|[A-Za-z]:\\)[^\s'\"<>]*")


def without_paths(text: str) -> str:
    """`text` with every absolute path replaced by "…" (trailing punctuation kept): a message never shows where
    the server keeps its files."""
    return _PATH.sub(lambda m: "…" + m.group()[len(m.group().rstrip(":;,.)]")) :], text)
