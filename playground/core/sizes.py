"""Bytes a session's kept things take, counted as they grow instead of by a walk of the heap (the sessions' budget,
ui/budget.py). Plain data only, no torch: a tensor or a cache is counted by the one who holds it (its storage).

plain_bytes(value): a small plain value (a round record, a decoded text) by sys.getsizeof of each of its parts: ints
outside CPython's cache of small ints, floats, strings, lists, tuples, dicts, dataclasses, and anything that says its
own size (nbytes()). Tally: a list that only grows (a run's rounds), each item counted once, when first seen."""

from __future__ import annotations

import sys
from dataclasses import fields, is_dataclass
from typing import Any

SHARED = (bool, type(None))  # singletons: nobody's own bytes
# An instance's attribute values: CPython 3.11+ keeps them inline, a slot each and a short header (reading
# __dict__ would allocate a dict for it, so it is not read)
INLINE = 8


def plain_bytes(value: Any, seen: set[int] | None = None) -> int:
    """Bytes of a plain value and of everything in it. Plain data is a tree but for its ints, which a value often
    holds twice (a round's new tokens are its draft's): each int object is counted once (`seen`: their ids)."""
    kind = type(value)
    if kind is int:
        if -5 <= value <= 256:
            return 0  # CPython shares the small ints
        seen = set() if seen is None else seen
        if id(value) in seen:
            return 0
        seen.add(id(value))
        return sys.getsizeof(value)
    if kind is str and len(value) <= 1 and (not value or ord(value) < 256):
        return 0  # CPython shares the empty string and the one-character latin-1 strings
    if kind in (float, str, bytes, complex) or kind in SHARED:
        return 0 if kind in SHARED else sys.getsizeof(value)
    seen = set() if seen is None else seen
    if kind in (list, tuple, set, frozenset):
        return sys.getsizeof(value) + sum(plain_bytes(item, seen) for item in value)
    if isinstance(value, dict):  # an OrderedDict's getsizeof holds its links too
        return sys.getsizeof(value) + sum(plain_bytes(k, seen) + plain_bytes(v, seen) for k, v in value.items())
    own = getattr(value, "nbytes", None)
    if callable(own):
        return own()
    if is_dataclass(value):
        names = [f.name for f in fields(value)]
        parts = sum(plain_bytes(getattr(value, n), seen) for n in names)
        return sys.getsizeof(value) + INLINE * (len(names) + 3) + parts
    return sys.getsizeof(value)


class Tally:
    """The bytes of a list's items, counted once each: of(items) counts only those appended since its last call
    (the same list grown, or a copy of it: its counted items still in place); anything else is counted afresh."""

    def __init__(self) -> None:
        self._count, self._bytes, self._last = 0, 0, None

    def of(self, items: list) -> int:
        n = self._count
        if n > len(items) or (n and items[n - 1] is not self._last):  # not the list counted before: start over
            n, self._bytes = 0, 0
        self._bytes += sum(plain_bytes(item) for item in items[n:])
        self._count, self._last = len(items), items[-1] if items else None
        return self._bytes + sys.getsizeof(items)
