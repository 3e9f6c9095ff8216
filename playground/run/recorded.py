"""Recorded runs: the Run tab's trace JSON read back and checked, so that the page can show a run again with
no model loaded (the gallery in assets/runs/, a file a teacher recorded before class).

A trace of version 2 carries what the views need besides the rounds: the target-alone rounds (for the comparison
and the race) and `decoded`, the tokenizer's answers the views asked for when the run was shown (the text of each
token in its left context). Reading one back gives a RunSpec, the rounds, the cost profile and a ReplayTokenizer
that answers the same questions from that table. Pure: no torch, transformers or gradio. Everything read here is
untrusted: each field is checked for its type and range, and every text reaches the page through the views'
escaping (views.text.escape_text, html.escape).
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, get_type_hints

from playground.core import theory
from playground.core.errors import PlaygroundError, shown
from playground.core.records import EXTRAS, RoundRecord, columns, stated
from playground.trace.replay import ReplayTokenizer
from playground.core.config import DecodeConfig, Precision
from playground.run.spec import DrafterSpec, PairSpec, RunSpec, options_of
from playground.core.treeshape import parse_tree
from playground.trace.tracefile import TRACE_FORMAT as FORMAT, TRACE_VERSION as VERSION

MAX_BYTES = 1_000_000  # a recorded run is a few tens of kB; 1 MB holds about a thousand rounds
MAX_ROUNDS = 4_096
MAX_DECODED = 100_000  # entries of the decode table
MAX_LIST = 4_096  # the longest list inside a round (a tree's nodes, a context's ids)
MAX_TEXT = 20_000  # characters of one text inside a round or the decode table
MAX_SECONDS = 86_400.0  # a round, a pass or a drafted token longer than a day is no measurement
PROB_SLACK = 1e-4  # probabilities written from fp32 or bf16 may round a hair past 1
KINDS = ("correction", "bonus", "target")
STOPS = ("", "eos", "length")


class BadRecording(PlaygroundError):
    """A file that is not a recorded run this app can show; the message says what is wrong with it."""


# ---------------------------------------------------------------- reading a file


@dataclass
class Recorded:
    """A recorded run, checked: what ran, its rounds, the target alone's, the profile, the tokenizer's answers."""

    spec: RunSpec
    target_precision: str
    draft_precision: str | None
    rounds: list[RoundRecord]
    baseline: list[RoundRecord]
    profile: theory.CostProfile | None
    tokenizer: ReplayTokenizer
    recorded_at: str = ""  # "2026-12-04 19:30 UTC", as the file says (text, shown escaped)
    segments: list[tuple[int, int]] = field(default_factory=list)  # an interleaved comparison's (trace.summarize)
    prompt_tokens: int | None = None  # the prompt's length in tokens (None: a trace from before it was written)


def too_large(size: int | None, what: str = "The file") -> str:
    """What the app says of a file over MAX_BYTES (of `size` bytes, if known), wherever it is refused: the page, the
    upload route, the tab."""
    said = f" {size:,} bytes;" if size is not None else ""
    return f"{what} is too large:{said} a trace file may be at most {MAX_BYTES:,} bytes (1 MB)."


def read(data: bytes) -> Recorded:
    """A trace file's bytes -> a Recorded run, or BadRecording saying what is wrong (too large, not JSON, another
    format or version, a field of the wrong type or out of range)."""
    if len(data) > MAX_BYTES:
        raise BadRecording(too_large(len(data)))
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadRecording(
            "The file is not JSON: open a trace.json that the Run tab's 'Trace as JSON' saved."
        ) from None
    if not isinstance(doc, dict):
        raise BadRecording("The file is JSON but not a trace: a trace is one object with 'format', 'rounds', ...")
    if doc.get("format") != FORMAT:
        if "rounds" in doc and "summary" in doc and "format" not in doc:
            raise BadRecording(
                "This trace was saved by an older version of the app, without the token texts: "
                "run it again and save a new one."
            )
        raise BadRecording(f"The file is not a trace of this app (its 'format' is {shown(doc.get('format'))}).")
    if doc.get("version") != VERSION:
        raise BadRecording(f"The trace has version {shown(doc.get('version'))}; this app reads version {VERSION}.")
    try:
        return _recorded(doc)
    except BadRecording:
        raise
    except PlaygroundError as exc:  # the spec's own checks name the field
        raise BadRecording(f"The trace's settings are not valid here: {exc}") from None


def _recorded(doc: dict) -> Recorded:
    config = _dict(doc, "config")
    decode = {f.name: config[f.name] for f in fields(DecodeConfig) if f.name in config}
    tree = decode.get("tree")
    if isinstance(tree, dict):  # dataclasses.asdict wrote the TreeShape
        tree = (
            f"dynamic:{tree.get('budget')}" if tree.get("budget") else "-".join(map(str, tree.get("branching") or []))
        )
    decode["tree"] = parse_tree(tree)
    decode["explain"] = 0
    target_precision = _precision(doc.get("target_precision"), "target_precision")
    draft_precision = _precision(doc.get("draft_precision"), "draft_precision", optional=True)
    chosen = doc.get("chosen_precisions") or [None, None]  # what the controls asked for (null: the device default)
    if not (isinstance(chosen, list) and len(chosen) == 2):
        raise BadRecording(f"The trace's 'chosen_precisions' must be [target, draft], got {shown(chosen)}.")
    draft_precision_chosen = _precision(chosen[1], "chosen_precisions", optional=True)
    if "drafter_options" in doc:  # the drafter's options by name (strategies/: its Options)
        options = _dict(doc, "drafter_options")
        drafter = DrafterSpec.of(doc.get("drafter"), **options)
    else:  # a trace from before drafter_options: the flat fields it had
        flat = {"precision": draft_precision_chosen, "exit_layer": doc.get("exit_layer") or None}
        drafter = DrafterSpec(doc.get("drafter"), options_of(doc.get("drafter"), flat))
    invariant = doc.get("invariant")  # the target ran the batch-invariant kernels (absent: not recorded)
    if invariant is not None and not isinstance(invariant, bool):
        raise BadRecording(f"The trace's 'invariant' must be true or false, got {shown(invariant)}.")
    pair = PairSpec(
        _text(doc.get("pair"), "pair"),
        _text(doc.get("target"), "target"),
        _text(doc.get("draft"), "draft") if doc.get("draft") is not None else None,
        _precision(chosen[0], "chosen_precisions", optional=True),
        invariant,
    )
    spec = RunSpec(pair, drafter, DecodeConfig(**decode), doc.get("prompt"))
    rounds = _rounds(doc.get("rounds"), "rounds")
    if not rounds:
        raise BadRecording("The trace has no rounds: there is nothing to show.")
    baseline = _rounds(doc.get("baseline_rounds") or [], "baseline_rounds")
    profile = None
    if doc.get("profile_verify_s") is not None:
        verify = _dict(doc, "profile_verify_s")
        if len(verify) > 64 or not all(isinstance(n, str) and n.isdigit() and 1 <= int(n) <= MAX_LIST for n in verify):
            raise BadRecording("The trace's 'profile_verify_s' must map n (1 to 4,096) to seconds, at most 64 of them.")
        try:
            seconds = {int(n): _real(s) for n, s in verify.items()}
        except (TypeError, ValueError):
            seconds = {0: math.nan}
        if not all(0 < s <= MAX_SECONDS for s in seconds.values()):
            raise BadRecording(
                f"The trace's 'profile_verify_s' must map n (1, 2, ...) to seconds above 0 and at most "
                f"{MAX_SECONDS:,.0f}."
            )
        draft_s = doc.get("profile_draft_s") or 0.0
        if isinstance(draft_s, bool) or not isinstance(draft_s, (int, float)) or not 0 <= draft_s <= MAX_SECONDS:
            raise BadRecording(
                f"The trace's 'profile_draft_s' (the draft's seconds per token) must be from 0 to "
                f"{MAX_SECONDS:,.0f}, got {shown(draft_s)}."
            )
        profile = theory.CostProfile(seconds, float(draft_s))
    return Recorded(
        spec,
        target_precision,
        draft_precision,
        rounds,
        baseline,
        profile,
        ReplayTokenizer(_decoded(doc.get("decoded"))),
        _text(doc.get("recorded_at") or "", "recorded_at")[:40],
        _segments(doc.get("segments"), len(rounds), len(baseline)),
        _prompt_tokens(doc.get("prompt_tokens")),
    )


def _prompt_tokens(value: Any) -> int | None:
    """The prompt's length in tokens: a whole number from 1 (None: not recorded)."""
    if value is None:
        return None
    if not (_int(value) and 1 <= value <= MAX_LIST * MAX_ROUNDS):
        raise BadRecording(f"The trace's 'prompt_tokens' must be a whole number from 1, got {shown(value)}.")
    return value


def _segments(value: Any, rounds: int, baseline: int) -> list[tuple[int, int]]:
    """An interleaved comparison's [speculative rounds, target-alone rounds] per segment: counts that add up to
    both sides' rounds (absent or null: the comparison ran one side after the other, or not at all)."""
    if value is None:
        return []
    ok = isinstance(value, list) and len(value) <= MAX_ROUNDS
    ok = ok and all(isinstance(s, list) and len(s) == 2 and all(_int(n) and n >= 0 for n in s) for s in value)
    if not ok or sum(s[0] for s in value) != rounds or sum(s[1] for s in value) != baseline:
        raise BadRecording(
            "The trace's 'segments' must be [speculative rounds, target-alone rounds] per segment, adding up to "
            f"its {rounds} rounds and {baseline} target-alone rounds."
        )
    return [(s[0], s[1]) for s in value]


def _dict(doc: dict, key: str) -> dict:
    value = doc.get(key)
    if not isinstance(value, dict):
        raise BadRecording(f"The trace's {key!r} must be an object, got {shown(value)}.")
    return value


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or len(value) > 1_000:
        raise BadRecording(f"The trace's {name!r} must be text (at most 1,000 characters), got {shown(value)}.")
    return value


def _precision(value: Any, name: str, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if value not in {p.value for p in Precision}:
        raise BadRecording(
            f"The trace's {name!r} must be one of {', '.join(p.value for p in Precision)}, got {shown(value)}."
        )
    return value


def _decoded(table: Any) -> dict:
    if not isinstance(table, list) or len(table) > MAX_DECODED:
        raise BadRecording(
            f"The trace's 'decoded' (the token texts) must be a list of at most {MAX_DECODED:,} entries."
        )
    answers = {}
    for entry in table:
        if not (
            isinstance(entry, list)
            and len(entry) == 3
            and _ints(entry[0])
            and isinstance(entry[1], bool)
            and isinstance(entry[2], str)
            and len(entry[2]) <= MAX_TEXT
        ):
            raise BadRecording(
                f"The trace's 'decoded' has an entry that is not [token ids, true/false, text]: {shown(entry)}."
            )
        answers[(tuple(entry[0]), entry[1])] = entry[2]
    return answers


def _ints(value: Any) -> bool:
    return isinstance(value, list) and len(value) <= MAX_LIST and all(_int(v) for v in value)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -1 <= value < 2**31


def _real(value: Any) -> float:
    """A number, or null (nan: not recorded)."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(value)
    return float(value)


def _reals(value: Any) -> list[float]:
    if not isinstance(value, list) or len(value) > MAX_LIST:
        raise ValueError(value)
    return [_real(v) for v in value]


def _rounds(items: Any, key: str) -> list[RoundRecord]:
    if not isinstance(items, list) or len(items) > MAX_ROUNDS:
        raise BadRecording(f"The trace's {key!r} must be a list of at most {MAX_ROUNDS:,} rounds.")
    rows = []
    total = 0
    for i, item in enumerate(items):
        try:
            row = _round(item)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            field = f": {exc.args[0]}" if isinstance(exc, _Impossible) else ""
            raise BadRecording(
                f"The trace's {key!r}: round {i} is not a round this app wrote (a field is missing, of "
                f"the wrong type or out of range{field})."
            ) from None
        total += len(row["new_tokens"])
        if row["round"] != i or row["total_new"] != total:  # rounds in order, the output growing by what each added
            raise BadRecording(
                f"The trace's {key!r}: round {i} is not a round this app wrote (its 'round' must be {i} "
                f"and its 'total_new' {total}, the tokens of the rounds so far)."
            )
        rows.append(row)
    used = [c for c in EXTRAS[::-1] if any(stated(row, c) for row in rows)]  # the strategy's own, a subtype first
    return [_record(row, used[0] if used else None) for row in rows]


class _Impossible(ValueError):
    """A field whose value no run can have; its message names the field and the range."""


def _within(name: str, values: list[float], low: float, high: float, slack: float = 0.0) -> None:
    """Each value from low to high (give or take `slack` for rounding), or nan (not recorded)."""
    if not all(math.isnan(v) or low <= v <= high + slack for v in values):
        raise _Impossible(f"{name!r} must be from {low:g} to {high:g}")


PROBABILITY = (0.0, 1.0, PROB_SLACK)  # probabilities and uniform draws
# A round's fields and their types are records.RoundRecord's (HINTS); beyond its type, what a run can hold is here.
RANGES = {
    "p": PROBABILITY,
    "q": PROBABILITY,
    "u": PROBABILITY,
    "token_q": PROBABILITY,
    "margins": (0.0, math.inf, 0.0),
    "load": (0.0, 4096.0, 0.0),
}
SECONDS = ("draft_s", "verify_s")  # a round's time is always measured: never null, NaN or infinite
CHOICES = {"token_kind": KINDS, "stop": STOPS}
SIGNED = ("token",)  # the one whole number that may be -1 (none); every other is >= 0
UNREAD = ("alternatives", "residual", "extras")  # not read back; a strategy's extras: by their own fields below
HINTS = get_type_hints(RoundRecord)


def _field(name: str, value: Any) -> Any:
    """One RoundRecord field's value as the record keeps it, checked for its type and what a run can hold
    (ValueError; _Impossible naming the field and its range where the type holds but no run has the value)."""
    hint = HINTS[name]
    if hint is int and _int(value) and (value >= 0 or name in SIGNED):
        return value
    if hint == list[int] and _ints(value):
        return list(value)
    if hint is str and value in CHOICES[name]:
        return value
    if name in SECONDS:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_SECONDS:
            raise _Impossible(f"{name!r} must be seconds from 0 to {MAX_SECONDS:,.0f}")
        return float(value)
    if hint in (float, list[float]):  # a number or null (nan: not recorded), in its range
        read = _reals(value) if hint == list[float] else _real(value)
        _within(name, read if hint == list[float] else [read], *RANGES[name])
        return read
    raise ValueError(name)


def _round(item: dict) -> dict:
    """One round's fields, checked (KeyError, TypeError, ValueError when one is missing or wrong)."""
    row: dict[str, Any] = {}
    for f in fields(RoundRecord):
        if f.name in UNREAD:
            continue
        if f.default is MISSING and f.default_factory is MISSING:  # required
            value = item[f.name]
        else:  # absent: a list's [], a number's null, else the field's default
            value = item.get(f.name, [] if f.default is MISSING else None if HINTS[f.name] is float else f.default)
        row[f.name] = _field(f.name, value)
    drafted, kept, added = len(row["draft_tokens"]), row["accepted"], len(row["new_tokens"])
    if drafted != row["k"] or kept > row["k"] or added > kept + 1:
        raise ValueError("counts")
    for cls in EXTRAS:  # a strategy's own fields, under their prefixed names, their defaults when absent
        for f in fields(cls):
            default = getattr(cls(), f.name)
            value = item.get(cls.PREFIX + f.name, default)
            if isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, int):
                ok = _int(value) and value >= 0
            elif isinstance(default, float):
                value = _real(value)
                ok = True
            elif isinstance(default, str):
                ok = isinstance(value, str) and len(value) <= MAX_TEXT
            elif f.name in ("parents", "path"):
                ok = _ints(value)
            else:
                ok = isinstance(value, list) and _plain(value)
            if not ok:
                raise ValueError(cls.PREFIX + f.name)
            row[cls.PREFIX + f.name] = value
    parents = row["tree_parents"]
    if parents and (len(parents) != row["k"] or any(not -1 <= p < i for i, p in enumerate(parents))):
        raise ValueError("tree")
    return row


def _plain(value: Any, depth: int = 0) -> bool:
    """JSON made of numbers, text and lists only (a strategy's own lists: texts, probabilities, nested tokens)."""
    if isinstance(value, list):
        return depth < 3 and len(value) <= MAX_LIST and all(_plain(v, depth + 1) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (bool, int)) or (isinstance(value, str) and len(value) <= MAX_TEXT)


def extra(row: dict, cls: type) -> Any:
    return cls(**{name: row[column] for name, column in columns(cls).items()})


def _record(row: dict, cls: type | None) -> RoundRecord:
    base = {f.name: row[f.name] for f in fields(RoundRecord) if f.name in row and f.name != "extras"}
    return RoundRecord(**base, extras=extra(row, cls) if cls is not None else None)
