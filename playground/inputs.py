"""The shapes of user input that are no one field's own: text, a number in a range, a list of names. Each is
refused with a message that names the field and quotes the value short (errors.shown). Part of the spec (spec.py
re-exports them): user input is read there and here only. Pure: no torch."""
from __future__ import annotations

from playground.errors import PlaygroundError, shown
from playground.numbers import is_real


def parse_text(value: object, name: str) -> str:
    """A text field's value (None -> ""), stripped; anything but text is refused, naming the field."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PlaygroundError(f"{name} must be text, got {shown(value)}.")
    return value.strip()


def parse_real(value: object, name: str, low: float, high: float) -> float:
    """A number from a slider or the API (or its text) from `low` to `high`; anything else is refused, naming it."""
    x = value
    if isinstance(value, str) and len(value) <= 40:
        try:
            x = float(value)
        except ValueError:
            pass
    if not is_real(x) or not low <= x <= high:
        raise PlaygroundError(f"{name} must be a number from {low} to {high}, got {shown(value)}.")
    return float(x)


def parse_names(value: object, name: str) -> list[str]:
    """A multiple choice's value: a list of names (one name alone counts as a list of one), without repeats."""
    values = [value] if isinstance(value, str) else value
    if values is None:
        return []
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
        raise PlaygroundError(f"{name} must be a list of names, got {shown(value)}.")
    return list(dict.fromkeys(values))
