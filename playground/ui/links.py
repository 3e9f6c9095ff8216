"""Settings as a link: the page's URL carries the shared controls (?pair=...&k=4&policy=theory&example=3), opening
it sets them, and the Export tab gives the link for the current ones. A value that is unknown or out of range is
left out with a note; a link never becomes an error page. The same checks set the controls from a recorded run.

    settings_link(controls)          -> "?pair=...&drafter=...&k=4..."
    read_settings({"k": "4", ...})   -> ({control name: value}, extras, notes)
"""

from __future__ import annotations

import math
from typing import Any, Callable
from urllib.parse import urlencode

import gradio as gr

from playground import models
from playground.env import settings
from playground.core.errors import PlaygroundError, shown
from playground.core.numbers import is_number_text
from playground.decoding import DRAFTERS, strategy
from playground.core.config import KPolicy, K_MAX, K_MIN
from playground.run.spec import parse_policy
from playground.core.treeshape import parse_tree
from playground.ui.common import NAMES, OPTION_DEFAULTS, Controls, load_examples

TARGET_CHOICES = ("default", "fp32", "bf16", "fp16")
DRAFT_CHOICES = ("default", "fp32", "bf16", "int8", "int4")
MAX_LINK_PROMPT = 2_000  # characters of a prompt a link may carry
MAX_PARAMS = 40  # a link with more parameters than this is read no further


class _Bad(ValueError):
    pass


def _number(low: float, high: float, whole: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text) if is_number_text(text) else float("nan")  # ASCII digits only, as the page writes
        except (TypeError, ValueError):
            raise _Bad(f"takes a number from {low:g} to {high:g}") from None
        if not math.isfinite(value) or not low <= value <= high or (whole and value != int(value)):
            raise _Bad(f"takes a{' whole' if whole else ''} number from {low:g} to {high:g}")
        return int(value) if whole else value

    return parse


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise _Bad(f"takes one of: {', '.join(choices)}")
        return text

    return parse


def _flag(text: str) -> bool:
    if text not in ("0", "1", "true", "false"):
        raise _Bad("takes 1 or 0")
    return text in ("1", "true")


def _pair(text: str) -> str:
    if text not in models.pairs():
        raise _Bad("is not a pair of this server")
    return text


def _drafter(text: str) -> str:
    return _choice(tuple(d.value for d in DRAFTERS))(text)


def _policy(text: str) -> str:
    try:
        return parse_policy(text).label
    except PlaygroundError:
        raise _Bad(f"takes one of: {', '.join(p.value for p in KPolicy)}") from None


def _tree(text: str) -> str:
    try:
        return parse_tree(text).label if parse_tree(text) is not None else ""
    except PlaygroundError:
        raise _Bad("takes children per depth ('3-2-1-1'), 'dynamic:N', 'sized:N' or 'confidence:N'") from None


def _prompt(text: str) -> str:
    if not text.strip() or len(text) > MAX_LINK_PROMPT or any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        raise _Bad(f"takes text of 1 to {MAX_LINK_PROMPT:,} characters")
    return text


def _example(text: str) -> str:
    examples = load_examples()
    number = _number(1, len(examples), whole=True)(text)
    return examples[number - 1]["prompt"]


def _options() -> dict[str, tuple[Callable[[str], Any], Any]]:
    """The strategies' widgets (decoding/strategies/): field name -> (parser of the text, default)."""
    out = {}
    for s in (strategy(kind) for kind in DRAFTERS):
        for w in s.widgets:
            default = OPTION_DEFAULTS[w.name]
            whole = float(w.step).is_integer() and not isinstance(default, float)
            out[w.name] = (_flag if isinstance(default, bool) else _number(w.low, w.high, whole=whole), default)
    return out


OPTIONS = _options()

# URL name -> (control name (common.NAMES), parser of the text)
FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "pair": ("pair", _pair),
    "drafter": ("drafter", _drafter),
    "target_precision": ("target_precision", _choice(TARGET_CHOICES)),
    "invariant": ("invariant", _flag),
    "draft_precision": ("draft_precision", _choice(DRAFT_CHOICES)),
    **{name: (name, parse) for name, (parse, _) in OPTIONS.items()},
    "k": ("k", _number(K_MIN, K_MAX, whole=True)),
    "tree": ("tree", _tree),
    "policy": ("policy", _policy),
    "confidence": ("confidence", _number(0, 0.95)),
    "temperature": ("temperature", _number(0, 2)),
    "top_p": ("top_p", _number(0.05, 1)),
    "max_new_tokens": ("max_new_tokens", lambda t: _number(1, settings.read().max_new_tokens, whole=True)(t)),
    "seed": ("seed", _number(0, 2**53, whole=True)),
    "example": ("prompt", _example),
    "prompt": ("prompt", _prompt),
}
FLAGS = ("compare", "projector")  # the Run tab's comparison box, the projector mode: 1 or 0
# The page's own parameters: Gradio's (__theme, view) and ours that another module reads (run: a recorded run).
OTHER = ("run", "__theme", "view")


def read_settings(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bool], list[str]]:
    """A link's query parameters -> ({control name: value}, {flag: bool}, notes on what was ignored and why)."""
    values: dict[str, Any] = {}
    flags: dict[str, bool] = {}
    notes: list[str] = []
    for i, (name, raw) in enumerate(params.items()):
        if i >= MAX_PARAMS:
            notes.append(f"only the first {MAX_PARAMS} settings were read")
            break
        text = str(raw)
        if name in FIELDS:
            field, parse = FIELDS[name]
            try:
                values[field] = parse(text)
            except _Bad as why:
                notes.append(f"{name}={shown(text)} {why}")
        elif name in FLAGS:
            try:
                flags[name] = _flag(text)
            except _Bad as why:
                notes.append(f"{name}={shown(text)} {why}")
        elif name not in OTHER:
            notes.append(f"{shown(name)} is not a setting")
    return values, flags, notes


def settings_note(notes: list[str]) -> str:
    return ("The link's settings were applied, except: " + "; ".join(notes) + ".") if notes else ""


def settings_link(c: Controls, compare: bool = False) -> tuple[str, str]:
    """(the query string for these controls' values, a note on what it leaves out). An example prompt goes by its
    number; another prompt as text when short enough."""
    params: dict[str, Any] = {
        "pair": c.pair,
        "drafter": c.drafter,
        "target_precision": c.target_precision,
        "invariant": int(bool(c.invariant)),
        "draft_precision": c.draft_precision,
    }
    for name, (_, default) in OPTIONS.items():  # the strategies' options, where they differ from the page's
        value = c.options[name]
        if value != default:
            params[name] = int(value) if isinstance(default, bool) else _whole(value)
    params |= {"k": _whole(c.k), "policy": parse_policy(c.policy).value}
    if c.tree:
        params["tree"] = str(c.tree)
    if c.confidence is not None:
        params["confidence"] = c.confidence
    params |= {
        "temperature": c.temperature,
        "top_p": c.top_p,
        "max_new_tokens": _whole(c.max_new_tokens),
        "seed": _whole(c.seed),
    }
    note = ""
    prompts = [e["prompt"] for e in load_examples()]
    if c.prompt in prompts:
        params["example"] = prompts.index(c.prompt) + 1
    elif isinstance(c.prompt, str) and 0 < len(c.prompt) <= MAX_LINK_PROMPT:
        params["prompt"] = c.prompt
    else:
        note = f"The prompt is longer than {MAX_LINK_PROMPT:,} characters: the link leaves it out."
    params["compare"] = int(bool(compare))  # always: the box starts ticked, so an unticked one must be said
    return "?" + urlencode(params), note


def _whole(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def control_updates(values: dict[str, Any]) -> list[Any]:
    """One value per control (common.NAMES), in order: the given ones, gr.skip() for the rest."""
    return [values[name] if name in values else gr.skip() for name in NAMES]
