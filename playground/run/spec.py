"""One typed description of a run, validated once, here.

Everything that decodes (the UI's tabs, the API, the benchmark, the sweep, the pair comparison,
step-through, export, the tests) builds a `RunSpec` and hands it to `playground.run.runner`. User
input (the UI's widgets, API values, CLI strings) is read only by the `parse_*` / `from_*`
functions of this module; after that, drafters, precisions and k policies travel as enums.
Every error is a PlaygroundError whose message names the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from playground.env import settings
from playground.core.config import (
    K_MAX,
    K_MIN,
    TARGET_PRECISIONS,
    DecodeConfig,
    DrafterKind,
    KPolicy,
    Precision,
    enum_value,
)
from playground.decoding import BASELINE, DRAFTERS, Strategy, kind_of, strategy
from playground.decoding.options import parse_options
from playground.core.errors import PlaygroundError, shown
from playground.core.inputs import MAX_LIST_CHARS, parse_text


@dataclass(frozen=True)
class DrafterSpec:
    """Which drafter (kind), with its own typed options: the kind's Options (decoding/strategies/, one module a
    kind: defaults, checks, label); None = its defaults. DrafterSpec.of(kind, **options) names them."""

    kind: DrafterKind = DrafterKind.DRAFT_MODEL
    options: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", kind_of(self.kind))  # a DrafterKind, or a kind decoding.register() added
        options_type = strategy(self.kind).options
        if self.options is None:
            object.__setattr__(self, "options", options_type())
        elif not isinstance(self.options, options_type):
            raise PlaygroundError(
                f"The '{self.kind.value}' drafter's options must be its own ({options_type.__module__}), "
                f"got {type(self.options).__name__}."
            )

    @classmethod
    def of(cls, kind: object = DrafterKind.DRAFT_MODEL, **options: Any) -> "DrafterSpec":
        """A drafter from its kind and options by name: DrafterSpec.of("early exit", exit_layer=7)."""
        kind = kind_of(kind)
        return cls(kind, options_of(kind, options, strict=True))

    @classmethod
    def target_alone(cls) -> "DrafterSpec":
        """The target alone: no draft (every speedup's baseline; decoding.BASELINE)."""
        return cls(BASELINE)

    def but(self, **changes: Any) -> "DrafterSpec":
        """The same drafter with some options changed (checked again)."""
        return DrafterSpec.of(self.kind, **(_values(self.options) | changes))

    def as_kind(self, kind: object) -> "DrafterSpec":
        """Another kind with the options it shares with this one (its precision, say); the rest its defaults."""
        return self if kind_of(kind) is self.kind else DrafterSpec(kind, options_of(kind, _values(self.options)))

    @property
    def precision(self) -> Precision | None:
        """The draft model's precision (None: the device default, or a drafter that runs no draft model)."""
        return getattr(self.options, "precision", None)

    @property
    def label(self) -> str:
        """A short human name: "draft model (int8)", "early exit (L = 7)", "prompt lookup"."""
        options = self.options.label
        return f"{self.kind.value} ({options})" if options else self.kind.value

    @property
    def needs_draft_model(self) -> bool:
        return strategy(self.kind).draft_model

    @property
    def same_tokenizer(self) -> bool:
        """Whether the pair's tokenizers must agree (the draft model drafters compare token ids)."""
        return strategy(self.kind).same_tokenizer

    @property
    def is_baseline(self) -> bool:
        """The target alone: no draft."""
        return self.kind is BASELINE


def _names(options_type: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(options_type))


def _values(options: Any) -> dict[str, Any]:
    return {name: getattr(options, name) for name in _names(type(options))}


def options_of(kind: object, values: dict | None, strict: bool = False) -> Any:
    """The kind's Options from values by field name; another kind's names are ignored (strict: refused)."""
    options_type = strategy(kind).options
    names = _names(options_type)
    values = dict(values or {})
    unknown = [n for n in values if n not in names]
    if strict and unknown:
        raise PlaygroundError(
            f"{shown(unknown[0])} is not an option of the '{kind_of(kind).value}' drafter"
            + (f"; its options: {', '.join(names)}." if names else "; it has none.")
        )
    return options_type(**{n: v for n, v in values.items() if n in names})


@dataclass(frozen=True)
class PairSpec:
    """The models: a draft (None for drafters that need none) and a target, as model specs
    ("pack:NAME", a Hub id, or a folder under the model roots), and the target's precision."""

    name: str
    target: str
    draft: str | None = None
    target_precision: Precision | None = None  # None = the device default (models.default_target_precision)
    # The target's kernels: True = batch-invariant where they run (bf16 on a CPU with AVX512-BF16: a position's
    # logits the same in every pass, so greedy output is the target's own, exactly; playground/kernels), False =
    # torch's stock kernels (near-ties can flip between a pass of 1 and of k + 1). None = the default
    # ($PLAYGROUND_INVARIANT, on).
    invariant: bool | None = None

    def __post_init__(self) -> None:
        if self.invariant is not None and not isinstance(self.invariant, bool):
            raise PlaygroundError(
                f"invariant (the batch-invariant kernels) must be true or false, got {self.invariant!r}."
            )
        if self.target_precision is not None:
            p = enum_value(Precision, self.target_precision, "target precision")
            if p not in TARGET_PRECISIONS:
                raise PlaygroundError(
                    f"target precision must be one of {', '.join(x.value for x in TARGET_PRECISIONS)}, got {shown(p.value)}."
                )
            object.__setattr__(self, "target_precision", p)


@dataclass(frozen=True)
class RunSpec:
    """One run: which models, which drafter, how to decode, which prompt."""

    pair: PairSpec
    drafter: DrafterSpec = field(default_factory=DrafterSpec)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    prompt: str = ""
    chat: bool = True  # apply the tokenizer's chat template (instruct models)

    def __post_init__(self) -> None:
        check_prompt(self.prompt)
        check_max_new_tokens(self.decode.max_new_tokens)
        if self.drafter.needs_draft_model and not self.pair.draft:
            raise PlaygroundError(
                f"The '{self.drafter.kind.value}' drafter needs a pair with a draft model; "
                f"{shown(self.pair.name)} has none."
            )
        if self.decode.tree is not None and not strategy(self.drafter.kind).tree:
            tree_drafters = [d.value for d in DRAFTERS if strategy(d).tree]
            raise PlaygroundError(
                f"A token tree needs a drafter that can draft one ({', '.join(tree_drafters)}); "
                f"'{self.drafter.kind.value}' drafts a chain only."
            )

    def baseline(self) -> "RunSpec":
        """The target alone on the same prompt, target, precision and sampling settings."""
        return replace(
            self,
            drafter=DrafterSpec.target_alone(),
            decode=replace(self.decode, policy=KPolicy.FIXED, tree=None),
        )

    def with_decode(self, **changes: Any) -> "RunSpec":
        return replace(self, decode=replace(self.decode, **changes))


# ---------------------------------------------------------------- reading user input (the one place)


def check_prompt(prompt: object) -> str:
    """A prompt the models can take (not empty, not over PLAYGROUND_MAX_PROMPT_CHARS, valid text), else a clear error."""
    if prompt is not None and not isinstance(prompt, str):
        raise PlaygroundError(f"The prompt must be text, got {shown(prompt)}.")
    if not prompt or not prompt.strip():
        raise PlaygroundError("The prompt is empty: type something to continue.")
    limit = settings.read().max_prompt_chars
    if len(prompt) > limit:
        raise PlaygroundError(f"The prompt is too long ({len(prompt)} characters; the limit is {limit}).")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError:
        raise PlaygroundError(
            "The prompt contains characters that are not valid text (a lone surrogate): remove them and try again."
        ) from None
    return prompt


def check_max_new_tokens(n: int) -> int:
    """A run's max_new_tokens within the server's limit (PLAYGROUND_MAX_NEW_TOKENS), read here, in the run's layer:
    DecodeConfig (core/, no environment) checks only that it is a whole number from 1."""
    limit = settings.read().max_new_tokens
    if n > limit:
        raise PlaygroundError(f"max_new_tokens must be a whole number from 1 to {limit}, got {shown(n)}.")
    return n


def parse_policy(value: object) -> KPolicy:
    """A k policy from a UI label ("adaptive (theory)"), a value ("theory") or a bool (True = heuristic)."""
    if isinstance(value, bool):
        return KPolicy.HEURISTIC if value else KPolicy.FIXED
    for policy in KPolicy:
        if value in (policy, policy.value, policy.label):
            return policy
    if value == "adaptive":  # the benchmark's older name for the heuristic schedule
        return KPolicy.HEURISTIC
    raise PlaygroundError(f"Unknown k policy {shown(value)}; choose one of: {', '.join(p.label for p in KPolicy)}.")


DEFAULT_PRECISION = "default"  # the UI's and the API's word for "this device's default" (None in a spec)


def parse_precision(value: object) -> object:
    """A precision widget's value: "default" (or empty) -> None, the device default; anything else is
    left for the spec to check (it names the field)."""
    return None if value in (None, "", DEFAULT_PRECISION) else value


def parse_precisions(text: object, name: str, allowed: tuple[Precision, ...]) -> list[str]:
    """A list of precisions, "fp32 bf16" -> ["fp32", "bf16"]; a value outside `allowed` is refused, naming the field."""
    text = parse_text(text, name)
    if len(text) > MAX_LIST_CHARS:
        raise PlaygroundError(f"{name}: the list is too long ({len(text)} characters; at most {MAX_LIST_CHARS}).")
    names = [p.value for p in allowed]
    items = [t.lower() for t in text.replace(",", " ").split()]
    if not items:
        raise PlaygroundError(f"{name}: give at least one of {', '.join(names)}.")
    bad = [t for t in items if t not in names]
    if bad:
        raise PlaygroundError(f"{name}: {shown(bad[0])} is not one of {', '.join(names)}.")
    return list(dict.fromkeys(items))


def parse_invariant(value: object) -> bool:
    """The 'exact numerics' checkbox (or an API value): true or false; "true" / "false" / 1 / 0 as text too."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise PlaygroundError(f"'Exact numerics' must be true or false, got {str(value)[:40]!r}.")


def parse_drafter(kind: object, precision: object = None, options: dict | None = None) -> DrafterSpec:
    """A drafter from the UI's / API's values. options: the strategies' widgets' values by name (exit_layer,
    suffix_*, lookahead_*; a widget's `unset` value, the early-exit layer's 0, is the option's None); only the
    chosen drafter's are read, the precision too."""
    if kind not in [d.value for d in DrafterKind] and not isinstance(kind, DrafterKind):
        raise PlaygroundError(f"Unknown drafter {shown(kind)}; choose one of: {', '.join(d.value for d in DRAFTERS)}.")
    kind = DrafterKind(kind)
    values = dict(options or {})
    for w in strategy(kind).widgets:
        if w.name in values:
            values[w.name] = w.read(values[w.name])
    return DrafterSpec(kind, options_of(kind, values | {"precision": parse_precision(precision)}))


def _spellings() -> dict[str, tuple[Strategy, str]]:
    """The command line's drafter names -> (the strategy, options they stand for): each pickable kind's value, its
    short name (Strategy.short) and its aliases ("self int8": self int4 with "bits=8"), the longest first."""
    out: dict[str, tuple[Strategy, str]] = {}
    for s in (strategy(kind) for kind in DRAFTERS):
        out |= {spelled: (s, "") for spelled in (s.kind.value, s.short) if spelled}
        out |= {alias: (s, options) for alias, options in (s.aliases or {}).items()}
    return dict(sorted(out.items(), key=lambda item: -len(item[0])))


def parse_drafter_name(name: str) -> DrafterSpec:
    """The command line's drafter names: a kind's value or its short name ("staged", "suffix", "lookahead"), then
    optionally ":" and its options (decoding.options.parse_options): "name=value" by an Options field's name
    ("prompt lookup:max-ngram=4") or a short one ("suffix:factor=2,min-prob=0.05,depth=32,memory",
    "lookahead:W=7,N=4,G=7,prompt-pool", "self int4:group=64,head=0", "draft model:int8,vocab=32768"), a flag alone,
    and a bare value for its positional option ("draft model:int8", "early exit:7"). "self int8" = "self int4:bits=8"."""
    name = str(name)
    for spelled, (s, preset) in _spellings().items():
        if name == spelled or name.startswith(spelled + ":"):
            text = ",".join(part for part in (preset, name[len(spelled) + 1 :]) if part)
            return DrafterSpec.of(s.kind, **parse_options(s, text, name))
    raise PlaygroundError(
        f"Unknown drafter {shown(name)}: use {[d.value for d in DRAFTERS]}, optionally with "
        f":{'/:'.join(p.value for p in Precision)} for a draft model, :L (a layer) for early exit."
    )


def parse_k(value: str) -> tuple[int, KPolicy]:
    """The command line's k values: a number, or a policy name ("adaptive" = heuristic, "theory", "confidence"),
    optionally with its starting k or cap after a colon ("confidence:8")."""
    value = str(value)
    name, _, start = value.partition(":")
    whole = lambda v: v.isascii() and v.isdigit() and len(v) <= 3  # not "²" (isdigit takes it, int() does not)
    if whole(value) or (start and whole(start)):
        k = int(start or value)
        if not K_MIN <= k <= K_MAX:
            raise PlaygroundError(
                f"--k takes whole numbers from {K_MIN} to {K_MAX} or a policy name, got {shown(value)}."
            )
        if not start:
            return k, KPolicy.FIXED
    else:
        k = DecodeConfig.default("k")
    try:
        return k, parse_policy(name if start else value)
    except PlaygroundError:
        raise PlaygroundError(
            f"--k takes whole numbers from {K_MIN} to {K_MAX}, 'adaptive' / 'heuristic', "
            f"'theory' or 'confidence' (with ':k' for its start or cap), got {shown(value)}."
        ) from None
