"""The generic types of a strategy (strategies/: one module per kind): the registry's entry (Strategy), what a run
adds when a drafter is built from its options and the pair (Context), a widget's description (the UI builds its
controls from these), the checks every Options dataclass shares, and reading the command line's "name=value"
options. Pure: no torch."""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable

from playground.core.config import Precision, enum_value
from playground.core.errors import PlaygroundError, shown
from playground.core.numbers import is_int, is_number_text, is_real
from playground.core.progress import Progress, quiet

if TYPE_CHECKING:
    from playground.core.draft import Drafter
    from playground.models import LoadedPair
    from playground.core.treeshape import TreeShape


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


NONE = "none"  # a peer's adapter where it has no equivalent of a strategy


class HFObject(Enum):
    """What transformers' arguments for a strategy name besides numbers (HFGenerate): the export writes its variable,
    the bench's HF peer passes the loaded object."""

    DRAFT = "the pair's draft model"
    TARGET = "the target"
    TOKENIZER = "the target's tokenizer"
    DRAFT_TOKENIZER = "the draft's own tokenizer"


@dataclass(frozen=True)
class HFGenerate:
    """How transformers' generate() runs a strategy (decoding.hf_generate, the one builder: the export writes it as
    code, the bench's HF peer calls generate with it). arguments: generate()'s keyword arguments for the drafting, each
    a number or an HFObject; none: the target alone. drafts: the model whose generation_config takes k, the schedule and
    the confidence threshold (num_assistant_tokens, ...). setup: code that readies generate() first (lade's patch of
    it), numbers of the options only; the export writes it, the bench runs no strategy that has one."""

    arguments: dict[str, Any]
    drafts: HFObject | None = None
    setup: tuple[str, ...] = ()


@dataclass(frozen=True)
class Peer:
    """How a peer runs a strategy (Strategy.hf: transformers' generate; Strategy.vllm: vLLM). adapter: the peer's way
    to run it, by name (the notes, the benchmark's rows, vllm/ runs vLLM's by it): transformers' "assisted",
    "universal", "prompt lookup", "nearest prompt lookup", "early exit", "lookahead" (lade); vLLM's methods
    "draft_model", "ngram", "suffix"; "target alone" (the peer runs the target alone: no drafting); or "none" (no
    equivalent: the export's snippet is the note). note: what the exported code does not do of the strategy, or what
    to know before running it, as comment lines ({tool}: "transformers" or "vLLM"). bench: the benchmark runs the
    adapter beside ours (the same algorithm on the same models). What transformers runs is data here too (drafts, k,
    config, setup), read by decoding.hf_generate; vLLM's speculative_config by decoding.speculative_config."""

    adapter: str = NONE
    note: str = ""
    bench: bool = False
    # what the strategy's Options add: to vLLM's speculative_config, or to transformers' generate() arguments
    config: Callable[[Any], dict] | None = None
    requires: tuple[str, ...] = ()  # the Python packages the peer needs beside itself (vLLM's worker checks them)
    # transformers: the model that drafts (DRAFT: assistant_model=, the pair's draft, with the tokenizers where it has
    # its own; TARGET: its own first layers), its generation_config taking k and the schedule
    drafts: HFObject | None = None
    k: str = ""  # transformers: the generate() argument that takes k where no model drafts (prompt_lookup_num_tokens)
    setup: Callable[[Any], tuple[str, ...]] | None = None  # transformers: HFGenerate.setup from the Options


@dataclass(frozen=True)
class Strategy:
    """A kind's factory, capabilities, options and peers (the registry's entry; each strategies/ module has one)."""

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
    # The command line (spec.parse_drafter_name): "NAME:OPTIONS", NAME the kind's value or `short`, OPTIONS
    # "name=value" by an Options field's name (dashes for underscores) or a short name (`names`), a flag alone, and a
    # bare value for the `positional` field ("draft model:int8": the precision; "early exit:7": the layer)
    short: str = ""  # the command line's short name ("staged", "suffix"), beside the kind's value
    names: dict[str, str] | None = None  # short option names -> Options field ({"w": "lookahead_window"})
    positional: str = ""  # the Options field that a bare value after the colon sets
    aliases: dict[str, str] | None = None  # a name that stands for it with options: {"self int8": "bits=8"}
    hf: Peer = Peer()  # how transformers' generate runs it (the export's snippet, the bench's HF rows)
    vllm: Peer = Peer()  # how vLLM runs it
    session: Callable[[], Any] | None = None  # a new session's state for this kind (suffix decoding's memory)
    summary: Callable[[dict], list[tuple[str, str]]] | None = None  # its rows in the summary panel (trace.summarize)

    @property
    def draft_model(self) -> bool:
        """Whether it runs the pair's draft model."""
        return self.model == "draft"

    @property
    def option_names(self) -> dict[str, str]:
        """The command line's option names -> Options field: the short ones, then every field by its own name with
        dashes ("max-ngram"), the positional one's too ("early exit:exit-layer=7")."""
        return dict(self.names or {}) | {f.name.replace("_", "-"): f.name for f in fields(self.options)}

    @property
    def listed_names(self) -> list[str]:
        """One name per option, as an error message lists them: the short names' options first, by their short name;
        the positional option only where it is the only one."""
        names = self.names or {}
        first = {field: short for short, field in reversed(names.items())}
        order = dict.fromkeys([*names.values(), *(f.name for f in fields(self.options))])
        listed = [first.get(field, field.replace("_", "-")) for field in order if field != self.positional]
        return listed or [self.positional.replace("_", "-")] * bool(self.positional)


def precision_of(options: Any) -> None:
    """Check and type an Options' draft precision (None: the device default)."""
    if options.precision is not None:
        typed(options, precision=enum_value(Precision, options.precision, "draft precision"))


@dataclass(frozen=True)
class Widget:
    """How the UI shows one option: a slider (low..high by step; a number box where `box`: a range too wide to drag),
    a checkbox (a bool default) or a dropdown (choices); label and help as the page shows them. The Options field of
    the same name holds the default."""

    name: str  # the Options field (and the control's and the link's name)
    label: str
    low: float = 0
    high: float = 1
    step: float = 1
    help: str = ""
    choices: tuple[str, ...] = ()
    unset: Any = None  # the widget's value that stands for the option's None (the early-exit layer's 0)
    box: bool = False  # a number box rather than a slider

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


def parse_options(s: Strategy, text: str, name: str) -> dict[str, Any]:
    """The command line's options after the colon -> the Options' values by field (spec.parse_drafter_name): "W=7,N=4"
    by Strategy.option_names ({"lookahead_window": 7, ...}); a flag ("memory", "prompt-pool") alone means true, "=0"
    false (self int4's "head=0"); a bare value sets the positional option ("int8": the precision). The Options check
    the values. name: the whole name, for the messages."""
    defaults, names, kind = s.options(), s.option_names, s.kind.value
    if text.strip() and not fields(s.options):
        raise PlaygroundError(f"{shown(kind)} takes no option, got {shown(name)}.")
    out: dict[str, Any] = {}
    bare: list[str] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, eq, value = (part.strip() for part in item.partition("="))
        field = names.get(key.lower().replace("_", "-"))
        if field is None and not eq and s.positional:
            bare.append(item)
            continue
        if field is None:
            listed = s.listed_names
            raise PlaygroundError(
                f"{shown(name)}: {shown(key)} is not an option of {kind}; use {', '.join(listed)} "
                f"(e.g. {s.short or kind}:{listed[0]}=...)."
            )
        default = getattr(defaults, field)
        if isinstance(default, bool):
            on, off = value.lower() in ("1", "true", "yes", "on"), value.lower() in ("0", "false", "no", "off")
            if eq and not (on or off):
                raise PlaygroundError(
                    f"{shown(name)}: {shown(key)} is a flag: write it alone to turn it on, or {key}=0 to turn it off."
                )
            out[field] = not (eq and off)
            continue
        out[field] = _read(default, value, f"{shown(name)}: {key}")
    if len(bare) > 1:
        what = s.positional.replace("_", " ")
        raise PlaygroundError(f"{shown(name)}: one {what} at most, got {shown(', '.join(bare))}.")
    if bare:
        out[s.positional] = _read(getattr(defaults, s.positional), bare[0], shown(name))
    return out


def _read(default: Any, text: str, what: str) -> Any:
    """A command-line value as its option's type: the default's (int, float); a str for an option whose default is
    None, a whole number as an int (a layer): the Options check it (a precision's name)."""
    if isinstance(default, str):
        return text
    try:
        if not isinstance(default, bool) and isinstance(default, (int, float)) and not is_number_text(text):
            raise ValueError(text)  # ASCII digits only: int() and float() take other scripts' ("٣")
        if isinstance(default, float):
            return float(text)
        if isinstance(default, int):
            return int(text)
    except ValueError:
        raise PlaygroundError(f"{what} takes a number, got {shown(text)}.") from None
    return int(text) if text.isascii() and text.isdigit() else text
