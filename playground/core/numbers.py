"""Numbers in and out, one definition each: what counts as a whole or a real number in user input (the
spec's checks), how a number is written in a table or a tooltip, and JSON without NaN. Pure: no torch."""

from __future__ import annotations

import math
import re
from typing import Any

# A number as the page documents it, in ASCII: int() and float() also take other scripts' digits ("٣"), "1_0",
# "inf" and "nan"
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


def is_int(x: object) -> bool:
    """A whole number: an int (not a bool) or an integral float."""
    return (isinstance(x, int) and not isinstance(x, bool)) or (isinstance(x, float) and x.is_integer())


def is_number_text(text: str) -> bool:
    """Text that writes a number in ASCII digits ("4", "-0.5", ".5", "1e-3"), before int() or float() reads it."""
    return bool(_NUMBER.fullmatch(text))


def is_real(x: object) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def fmt(x: Any, digits: int = 2, suffix: str = "", missing: str = "–") -> str:
    """A number for a table or a tooltip: `missing` for None, nan and inf; a float with `digits` decimals;
    anything else as it prints."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return missing
    return f"{x:.{digits}f}{suffix}" if isinstance(x, float) else f"{x}{suffix}"


def json_safe(x: Any) -> Any:
    """x with every nan and inf replaced by None, inside dicts, lists and tuples too (JSON has no NaN)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x
