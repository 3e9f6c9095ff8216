"""The shapes of user input that are no one field's own: text, a number in a range, a list of names, a list of
numbers. Each is refused with a message that names the field and quotes the value short (errors.shown). Part of
the spec: user input is read there and here only. Pure: no torch."""

from __future__ import annotations

import re
from typing import Callable

from playground.core.errors import PlaygroundError, shown
from playground.core.numbers import is_number_text, is_real

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a Hugging Face Hub id: owner/name
MAX_LIST_CHARS = 2_000  # a sweep's k / temperature box: refused before parsing when longer


def parse_text(value: object, name: str) -> str:
    """A text field's value (None -> ""), stripped; anything but text is refused, naming the field."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PlaygroundError(f"{name} must be text, got {shown(value)}.")
    return value.strip()


def parse_real(value: object, name: str, low: float, high: float) -> float:
    """A number from a slider or the API from `low` to `high`; anything else, text included ("0.5"), is refused,
    naming it, as every other numeric input refuses text (spec.py's checks)."""
    if not is_real(value) or not low <= value <= high:
        text = " (text, not a number)" if isinstance(value, str) else ""
        raise PlaygroundError(f"{name} must be a number from {low} to {high}, got {shown(value)}{text}.")
    return float(value)


def parse_names(value: object, name: str) -> list[str]:
    """A multiple choice's value: a list of names (one name alone counts as a list of one), without repeats."""
    values = [value] if isinstance(value, str) else value
    if values is None:
        return []
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
        raise PlaygroundError(f"{name} must be a list of names, got {shown(value)}.")
    return list(dict.fromkeys(values))


def parse_list(
    text: object, name: str, cast: Callable[[str], float], check: Callable[[float], bool], rule: str, limit: int = 64
) -> list:
    """ "1 2 4, 8" -> [1, 2, 4, 8], in linear time; oversized input is refused before it is parsed. Numbers in ASCII
    digits only, as the page writes them."""
    text = parse_text(text, name)
    if len(text) > MAX_LIST_CHARS:
        raise PlaygroundError(f"{name}: the list is too long ({len(text)} characters; at most {MAX_LIST_CHARS}).")
    items = text.replace(",", " ").split()
    if not items:
        raise PlaygroundError(f"{name}: give at least one value ({rule}).")
    values: dict = {}
    for t in items:
        try:
            if not is_number_text(t):
                raise ValueError(t)
            v = cast(t)
        except ValueError:
            raise PlaygroundError(f"{name}: {shown(t)} is not a number ({rule}).") from None
        if not check(v):
            raise PlaygroundError(f"{name}: {shown(t)} is out of range ({rule}).")
        values.setdefault(v, None)
        if len(values) > limit:
            raise PlaygroundError(f"{name}: more than {limit} distinct values.")
    return list(values)
