"""One typed description of a run, validated once, here.

Everything that decodes (the UI's tabs, the API, the benchmark, the sweep, the pair comparison,
step-through, export, the tests) builds a `RunSpec` and hands it to `playground.runner`. User
input (the UI's widgets, API values, CLI strings) is read only by the `parse_*` / `from_*`
functions of this module; after that, drafters, precisions and k policies travel as enums.
Every error is a PlaygroundError whose message names the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from playground import settings
from playground import spec_draftfree as draftfree
from playground.config import K_MAX, K_MIN, TARGET_PRECISIONS, DecodeConfig, DrafterKind, KPolicy, Precision, enum_value
from playground.decoding import DRAFTERS, kind_of, strategy
from playground.errors import PlaygroundError, shown
from playground.inputs import MAX_LIST_CHARS
from playground.numbers import is_int
from playground.spec_draftfree import LOOKAHEAD_DEFAULTS


@dataclass(frozen=True)
class DrafterSpec:
    """Which drafter, with its own typed options."""

    kind: DrafterKind = DrafterKind.DRAFT_MODEL
    precision: Precision | None = None  # draft models: None = the device default (models.default_draft_precision)
    exit_layer: int | None = None  # early exit: the target's layers that draft; None = a quarter of them
    max_ngram: int = 3  # prompt lookup: longest n-gram matched
    draft_vocab: int = (
        0  # draft model (chains): propose from the first N token ids and the sequence's (0: all; decoding/vocab.py)
    )
    # suffix decoding, vLLM's names in brackets; lookahead decoding's W, N, G (spec_draftfree.py: ranges, checks)
    suffix_memory: bool = False  # also draft from this session's earlier outputs (off: runs stay independent)
    suffix_factor: float = 1.0  # a draft holds at most factor x (matched length) tokens [max_spec_factor]
    suffix_min_prob: float = 0.1  # stop a draft where its frequency estimate falls under this [min_token_prob]
    suffix_depth: int = 24  # the suffix tree's depth: match plus draft [max_tree_depth]
    lookahead_window: int = LOOKAHEAD_DEFAULTS[0]  # W: columns of the Jacobi window
    lookahead_ngram: int = LOOKAHEAD_DEFAULTS[1]  # N: n-gram size (the window's levels + 1)
    lookahead_guesses: int = LOOKAHEAD_DEFAULTS[2]  # G: n-grams verified per round
    lookahead_prompt_pool: bool = False  # the pool also holds the prompt's and the output's n-grams

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", kind_of(self.kind))  # a DrafterKind, or a kind decoding.register() added
        if self.precision is not None:
            object.__setattr__(self, "precision", enum_value(Precision, self.precision, "draft precision"))
        if self.exit_layer is not None:
            if not is_int(self.exit_layer) or self.exit_layer < 1:
                raise PlaygroundError(
                    f"The early-exit layer must be a whole number >= 1 (or empty for a quarter "
                    f"of the target's layers), got {shown(self.exit_layer)}."
                )
            object.__setattr__(self, "exit_layer", int(self.exit_layer))
        if not is_int(self.draft_vocab) or not (self.draft_vocab == 0 or 256 <= self.draft_vocab <= 10**6):
            raise PlaygroundError(
                f"The draft vocabulary must be 0 (all of it) or a whole number of tokens from 256 to "
                f"1,000,000, got {shown(self.draft_vocab)}."
            )
        object.__setattr__(self, "draft_vocab", int(self.draft_vocab))
        if not is_int(self.max_ngram) or not 1 <= self.max_ngram <= 8:
            raise PlaygroundError(
                f"The prompt-lookup n-gram size must be a whole number from 1 to 8, got {shown(self.max_ngram)}."
            )
        for name, value in draftfree.check(self).items():
            object.__setattr__(self, name, value)

    @property
    def label(self) -> str:
        """A short human name: "draft model (int8)", "early exit (L = 7)", "prompt lookup"."""
        if self.needs_draft_model and (self.precision or self.draft_vocab):
            parts = [
                p
                for p in (self.precision and self.precision.value, self.draft_vocab and f"{self.draft_vocab:,} tokens")
                if p
            ]
            return f"{self.kind.value} ({', '.join(parts)})"
        if self.kind is DrafterKind.EARLY_EXIT and self.exit_layer:
            return f"{self.kind.value} (L = {self.exit_layer})"
        if strategy(self.kind).options:
            return draftfree.label(self, strategy(self.kind).options)
        return self.kind.value

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
        return self.kind is DrafterKind.TARGET_ALONE


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
            drafter=DrafterSpec(DrafterKind.TARGET_ALONE),
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
    text = "" if text is None else str(text)
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


def parse_drafter(
    kind: object, precision: object = None, exit_layer: object = None, options: dict | None = None
) -> DrafterSpec:
    """A drafter from the UI's / API's values. exit_layer 0 or empty means the default layer. options: the
    draft-free drafters' fields by name (suffix_*, lookahead_*); only the chosen drafter's are read."""
    if kind not in [d.value for d in DrafterKind] and not isinstance(kind, DrafterKind):
        raise PlaygroundError(f"Unknown drafter {shown(kind)}; choose one of: {', '.join(d.value for d in DRAFTERS)}.")
    kind = DrafterKind(kind)
    if exit_layer in (None, "", 0, 0.0):
        exit_layer = None
    elif isinstance(exit_layer, bool) or not is_int(exit_layer) or exit_layer < 0:
        raise PlaygroundError(
            f"The early-exit layer must be a whole number (0 = a quarter of the target's layers), got {shown(exit_layer)}."
        )
    precision = parse_precision(precision)
    return DrafterSpec(
        kind,
        precision if strategy(kind).draft_model else None,
        exit_layer if kind is DrafterKind.EARLY_EXIT else None,
        **draftfree.options_of(strategy(kind).options, options),
    )


def parse_drafter_name(name: str) -> DrafterSpec:
    """The command line's drafter names: "draft model", "draft model:int8" (",vocab=32768": decoding/vocab.py),
    "early exit:7", "prompt lookup",
    "cross-tokenizer draft model" (":int8" too), "staged" (its full name too; ":int8" too), "suffix" (":factor=2,
    min-prob=0.05,depth=32,memory"), "lookahead" (":W=7,N=4,G=7,prompt-pool"), these two by their full names too."""
    name = str(name)
    if name.startswith(DrafterKind.STAGED.value):  # its own name has a colon
        name = "staged" + name[len(DrafterKind.STAGED.value) :]
    kind, _, option = name.partition(":")
    short = {"staged": DrafterKind.STAGED, "suffix": DrafterKind.SUFFIX, "lookahead": DrafterKind.LOOKAHEAD}
    kind = short[kind].value if kind in short else kind
    if kind in [d.value for d in DRAFTERS] and strategy(kind).options:
        return DrafterSpec(DrafterKind(kind), **draftfree.named_options(strategy(kind).options, option, name, kind))
    if kind not in [d.value for d in DRAFTERS]:
        raise PlaygroundError(
            f"Unknown drafter {shown(name)}: use {[d.value for d in DRAFTERS]}, optionally with "
            f":{'/:'.join(p.value for p in Precision)} for a draft model, :L (a layer) for early exit."
        )
    if kind == DrafterKind.EARLY_EXIT.value:
        if option and not (option.isascii() and option.isdigit()):
            raise PlaygroundError(f"Early exit takes a layer number after the colon, got {shown(name)}.")
        return DrafterSpec(DrafterKind.EARLY_EXIT, exit_layer=int(option) if option else None)
    if strategy(kind).draft_model:  # "draft model:int8", "draft model:vocab=32768", "draft model:int8,vocab=32768"
        precision, vocab = None, 0
        for part in filter(None, option.split(",")):
            if part.startswith("vocab="):
                vocab = int(part[6:]) if part[6:].isascii() and part[6:].isdigit() else part[6:]
            else:
                precision = part
        return DrafterSpec(DrafterKind(kind), precision=precision, draft_vocab=vocab)
    if option:
        raise PlaygroundError(f"{shown(kind)} takes no option, got {shown(name)}.")
    return DrafterSpec(DrafterKind(kind))


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
        k = 4
    try:
        return k, parse_policy(name if start else value)
    except PlaygroundError:
        raise PlaygroundError(
            f"--k takes whole numbers from {K_MIN} to {K_MAX}, 'adaptive' / 'heuristic', "
            f"'theory' or 'confidence' (with ':k' for its start or cap), got {shown(value)}."
        ) from None
