"""The draft-free drafters' options (suffix decoding, lookahead decoding): defaults, ranges, the checks and their
messages, the labels, the command line's option names. Part of the run description: spec.DrafterSpec holds the
fields (prefixed suffix_ and lookahead_; decoding.Strategy.options names a drafter's prefix) and calls check().
Pure: no torch."""

from __future__ import annotations

from typing import Any

from playground.errors import PlaygroundError, shown
from playground.numbers import is_int, is_real

# Lookahead decoding's window W, n-gram size N and verification budget G: sized for a CPU pass of about 16 tokens
# (docs/draft-free.md); the paper's GPU settings (W 15, N 5, G 15) score about 140 tokens a pass.
LOOKAHEAD_DEFAULTS = (5, 3, 3)
LOOKAHEAD_RANGES = {
    "lookahead_window": (1, 16, "the window W"),
    "lookahead_ngram": (2, 8, "the n-gram size N"),
    "lookahead_guesses": (1, 16, "the verification budget G (n-grams verified per round)"),
}
MAX_LOOKAHEAD_WIDTH = 128  # the most tokens one lookahead pass may score beyond the sequence (window + candidates)
SUFFIX_DEFAULTS = dict(suffix_memory=False, suffix_factor=1.0, suffix_min_prob=0.1, suffix_depth=24)  # vLLM's defaults
FLAGS = ("suffix_memory", "lookahead_prompt_pool")
# The command line's option names ("lookahead:W=7,N=4,G=7", "suffix:factor=2,memory"), per field prefix
NAMED = {
    "suffix_": {
        "factor": "suffix_factor",
        "min-prob": "suffix_min_prob",
        "depth": "suffix_depth",
        "memory": "suffix_memory",
    },
    "lookahead_": {
        "w": "lookahead_window",
        "n": "lookahead_ngram",
        "g": "lookahead_guesses",
        "prompt-pool": "lookahead_prompt_pool",
    },
}


def lookahead_width(w: int, n: int, g: int) -> int:
    """Tokens a full lookahead pass scores beyond the sequence: the window, (W - 1) + (N - 2) W, and at most G
    candidates of N - 1 tokens."""
    return (w - 1) + (n - 2) * w + g * (n - 1)


def check(spec: Any) -> dict[str, Any]:
    """The options of a DrafterSpec, typed ({field: value}); a PlaygroundError names a bad one."""
    for name in FLAGS:
        if not isinstance(getattr(spec, name), bool):
            raise PlaygroundError(f"{name.replace('_', ' ')} must be true or false, got {shown(getattr(spec, name))}.")
    if not is_real(spec.suffix_factor) or not 0 < spec.suffix_factor <= 16:
        raise PlaygroundError(
            f"suffix decoding: the spec factor (draft tokens per matched token) must be a number "
            f"above 0 and at most 16, got {shown(spec.suffix_factor)}."
        )
    if not is_real(spec.suffix_min_prob) or not 0 <= spec.suffix_min_prob < 1:
        raise PlaygroundError(
            f"suffix decoding: the minimum token probability must be from 0 to below 1, "
            f"got {shown(spec.suffix_min_prob)}."
        )
    if not is_int(spec.suffix_depth) or not 2 <= spec.suffix_depth <= 64:
        raise PlaygroundError(
            f"suffix decoding: the tree depth must be a whole number from 2 to 64, got {shown(spec.suffix_depth)}."
        )
    out = dict(
        suffix_factor=float(spec.suffix_factor),
        suffix_min_prob=float(spec.suffix_min_prob),
        suffix_depth=int(spec.suffix_depth),
    )
    for name, (low, high, what) in LOOKAHEAD_RANGES.items():
        value = getattr(spec, name)
        if isinstance(value, bool) or not is_int(value) or not low <= value <= high:
            raise PlaygroundError(
                f"lookahead decoding: {what} must be a whole number from {low} to {high}, got {shown(value)}."
            )
        out[name] = int(value)
    w, n, g = out["lookahead_window"], out["lookahead_ngram"], out["lookahead_guesses"]
    if lookahead_width(w, n, g) > MAX_LOOKAHEAD_WIDTH:
        raise PlaygroundError(
            f"lookahead decoding: W = {w}, N = {n} and G = {g} make a pass of up to "
            f"{lookahead_width(w, n, g)} tokens beyond the sequence; at most {MAX_LOOKAHEAD_WIDTH}: "
            f"a smaller W, N or G."
        )
    return out


def label(spec: Any, prefix: str) -> str:
    """The drafter's name with its options: "lookahead decoding (W = 5, N = 3, G = 3)", "suffix decoding" (its
    defaults), "suffix decoding (factor 2, session memory)"."""
    name = spec.kind.value
    if prefix == "lookahead_":
        pool = ", prompt pool" if spec.lookahead_prompt_pool else ""
        return f"{name} (W = {spec.lookahead_window}, N = {spec.lookahead_ngram}, G = {spec.lookahead_guesses}{pool})"
    options = [
        f"{short} {getattr(spec, field):g}"
        for short, field in (("factor", "suffix_factor"), ("min p", "suffix_min_prob"), ("depth", "suffix_depth"))
        if getattr(spec, field) != SUFFIX_DEFAULTS[field]
    ]
    options += ["session memory"] if spec.suffix_memory else []
    return f"{name} ({', '.join(options)})" if options else name


def options_of(prefix: str, values: dict | None) -> dict:
    """The values (the UI's controls, by field name) that belong to the drafter whose fields start with `prefix`."""
    return {name: value for name, value in (values or {}).items() if prefix and name.startswith(prefix)}


def named_options(prefix: str, text: str, name: str, drafter: str) -> dict:
    """The command line's options after the colon, "W=7,N=4,G=7" -> {"lookahead_window": 7, ...}; a flag
    ("memory", "prompt-pool") alone means true."""
    names, out = NAMED[prefix], {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, eq, value = (part.strip() for part in item.partition("="))
        field = names.get(key.lower().replace("_", "-"))
        if field is None:
            raise PlaygroundError(
                f"{shown(name)}: {shown(key)} is not an option of {drafter}; use {', '.join(names)} "
                f"(e.g. {drafter.split()[0]}:{list(names)[0]}=...)."
            )
        if field in FLAGS:
            if eq and value.lower() not in ("1", "true", "yes", "on"):
                raise PlaygroundError(f"{shown(name)}: {shown(key)} is a flag: write it alone to turn it on.")
            out[field] = True
            continue
        try:
            out[field] = float(value) if field in ("suffix_factor", "suffix_min_prob") else int(value)
        except ValueError:
            raise PlaygroundError(f"{shown(name)}: {key} takes a number, got {shown(value)}.") from None
    return out
