"""The generic types of a strategy (strategies/: one module per kind): the registry's entry (Strategy), what a run
adds when a drafter is built from its options and the pair (Context), a widget's description (the UI builds its
controls from these), the checks every Options dataclass shares, and reading the command line's "name=value"
options. Pure: no torch."""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable

from playground.config import Precision, enum_value
from playground.errors import PlaygroundError, shown
from playground.numbers import is_int, is_real
from playground.progress import Progress, quiet

if TYPE_CHECKING:
    from playground.draft import Drafter
    from playground.models import LoadedPair
    from playground.treeshape import TreeShape


@dataclass(frozen=True)
class NoOptions:
    """A strategy without options."""

    label = ""


@dataclass(frozen=True)
class Context:
    """What a run adds when a strategy builds its drafter from its options and the loaded pair: the confidence
    threshold (0: off; KPolicy.CONFIDENCE), how the run encodes its prompt for a given tokenizer (a draft with its own
    tokenizer encodes the prompt its own way), the token tree for a strategy that drafts its own (Strategy.own_tree),
    and the session's state for this kind (Strategy.session: suffix decoding's memory of earlier runs); progress:
    where a build that takes a while says so (self int4 making the target's quantised copy, and what it adds)."""

    confidence: float = 0.0
    encode: Callable[[object], list[int]] | None = None
    tree: TreeShape | None = None
    kept: Any = None  # the session's state for this kind
    progress: Progress = quiet


@dataclass(frozen=True)
class Strategy:
    """A kind's factory, capabilities and options (the registry's entry; each strategies/ module has one)."""

    kind: Enum
    build: Callable[[Any, LoadedPair, Context], Drafter]  # build(options, pair, context): the drafter
    # the model that drafts: "draft" (the pair's draft model), "target" (its first layers), "copy" (the target's own
    # quantised copy, made from it: self int4), "" none
    model: str = ""
    same_tokenizer: bool = False  # the draft's token ids must be the target's (models.check_compatible)
    pair_draft: bool = False  # the pair's draft model on its own: which of these a pair names (models.Pair.drafter)
    tree: bool = False  # can draft a token tree (DecodeConfig.tree)
    own_tree: bool = False  # builds its tree itself (Context.tree), rather than through a TreeDrafter around a model
    batch: bool = False  # the batched engine (batch.py) can run it
    pickable: bool = True  # a choice in the UI, the API and the CLI
    ran: str = ""  # what drafted, for the summary panel ({draft} / {target}: the precisions that ran)
    options: type = NoOptions  # its Options dataclass (DrafterSpec.options): defaults, checks, label
    widgets: tuple[Widget, ...] = ()  # how the UI shows the options it shows (layout.py builds the controls)
    about: str = ""  # the UI's note above its widgets; with one, they sit folded in the options accordion
    names: dict[str, str] | None = None  # the command line's "name=value" options after the colon, by field
    session: Callable[[], Any] | None = None  # a new session's state for this kind (suffix decoding's memory)
    summary: Callable[[dict], list[tuple[str, str]]] | None = None  # its rows in the summary panel (trace.summarize)

    @property
    def draft_model(self) -> bool:
        """Whether it runs the pair's draft model."""
        return self.model == "draft"


def precision_of(options: Any) -> None:
    """Check and type an Options' draft precision (None: the device default)."""
    if options.precision is not None:
        typed(options, precision=enum_value(Precision, options.precision, "draft precision"))


@dataclass(frozen=True)
class Widget:
    """How the UI shows one option: a slider (low..high by step), a checkbox (a bool default) or a dropdown
    (choices); label and help as the page shows them. The Options field of the same name holds the default."""

    name: str  # the Options field (and the control's and the link's name)
    label: str
    low: float = 0
    high: float = 1
    step: float = 1
    help: str = ""
    choices: tuple[str, ...] = ()
    unset: Any = None  # the widget's value that stands for the option's None (the early-exit layer's 0)

    def shown(self, value: Any) -> Any:
        """The widget's value for an option's value."""
        return self.unset if value is None else value

    def read(self, value: Any) -> Any:
        """The option's value for the widget's: `unset` (or an empty box) is None; anything else is the Options'
        to check."""
        unset = self.unset is not None and not isinstance(value, bool) and (value == self.unset or value == "")
        return None if unset else value


def whole(value: object, low: int, high: int, what: str) -> int:
    """`value` as a whole number from low to high, else a PlaygroundError naming `what`."""
    if isinstance(value, bool) or not is_int(value) or not low <= value <= high:
        raise PlaygroundError(f"{what} must be a whole number from {low} to {high}, got {shown(value)}.")
    return int(value)


def real(value: object, ok: bool, what: str) -> float:
    if not is_real(value) or not ok:
        raise PlaygroundError(f"{what}, got {shown(value)}.")
    return float(value)


def flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise PlaygroundError(f"{what} must be true or false, got {shown(value)}.")
    return value


def typed(options: Any, **values: Any) -> None:
    """Set a frozen Options' checked values (its __post_init__ calls this)."""
    for name, value in values.items():
        object.__setattr__(options, name, value)


def parse_named(options_type: type, names: dict[str, str], text: str, name: str, drafter: str) -> dict[str, Any]:
    """The command line's options after the colon, "W=7,N=4,G=7" with names {"w": "lookahead_window", ...} ->
    {"lookahead_window": 7, ...} (options_type's fields); a bool field ("memory", "prompt-pool") alone means true, "=0"
    false (self int4's "head=0")."""
    kinds = {f.name: f for f in fields(options_type)}
    defaults = options_type()
    out: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, eq, value = (part.strip() for part in item.partition("="))
        field = names.get(key.lower().replace("_", "-"))
        if field is None or field not in kinds:
            raise PlaygroundError(
                f"{shown(name)}: {shown(key)} is not an option of {drafter}; use {', '.join(names)} "
                f"(e.g. {name.partition(':')[0]}:{list(names)[0]}=...)."
            )
        if isinstance(getattr(defaults, field), bool):
            on, off = value.lower() in ("1", "true", "yes", "on"), value.lower() in ("0", "false", "no", "off")
            if eq and not (on or off):
                raise PlaygroundError(
                    f"{shown(name)}: {shown(key)} is a flag: write it alone to turn it on, or {key}=0 to turn it off."
                )
            out[field] = not (eq and off)
            continue
        try:
            out[field] = float(value) if isinstance(getattr(defaults, field), float) else int(value)
        except ValueError:
            raise PlaygroundError(f"{shown(name)}: {key} takes a number, got {shown(value)}.") from None
    return out
