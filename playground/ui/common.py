"""What every tab shares: the shared controls as one named value, reading them into a RunSpec,
the status line and the one-line message for an unexpected error.

User input is parsed only by playground.run.spec (parse_drafter, parse_policy, the dataclasses'
checks); this module only gathers the widgets' values and hands them over.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, NamedTuple

import gradio as gr

from playground import decoding, models
from playground.core.errors import Ended, PlaygroundError, without_paths
from playground.core.progress import Progress
from playground.run.spec import (
    DEFAULT_PRECISION,
    PairSpec,
    RunSpec,
    parse_drafter,
    parse_invariant,
    parse_policy,
    parse_precision,
)
from playground.core.config import DecodeConfig
from playground.core.inputs import parse_text

ASSETS = Path(__file__).resolve().parents[2] / "assets"
PROMPTS_FILE = ASSETS / "prompts.json"
# One queue for every event that decodes (generate, step-through, sweep, compare): one decode at a time
# (demo.queue's default_concurrency_limit), so that no run's timing shares the machine with another's.
DECODING = "decoding"

try:  # on Hugging Face Spaces (ZeroGPU) the decoding runs under spaces.GPU; elsewhere as is
    import spaces

    gpu: Callable = spaces.GPU
except ImportError:

    def gpu(fn: Callable) -> Callable:
        return fn


# ---------------------------------------------------------------- the shared controls


# The strategies' own options the page shows (decoding/strategies/: each module's WIDGETS), in the registry's order,
# with their widgets' defaults. The controls hold them as one field (Controls.options), so that a strategy's widgets
# need no field here: the layout, the links and the spec take them from the registry.
OPTION_DEFAULTS: dict[str, Any] = {
    w.name: w.shown(getattr(s.options(), w.name))
    for s in (decoding.strategy(kind) for kind in decoding.DRAFTERS)
    for w in s.widgets
}


@dataclass(frozen=True)
class Controls:
    """The controls every tab runs with, in the order of the page (and of the API's inputs: NAMES).

    The layout builds one whose fields are the widgets (`as_inputs()` is then the `inputs=` list);
    a callback gets one whose fields are their values (`Controls.of(*values)`)."""

    pair: Any  # a catalog name
    draft_id: Any  # custom draft model id or folder ("" = the pair's)
    target_id: Any  # custom target model id or folder ("" = the pair's)
    target_precision: Any  # "default", "fp32", "bf16", "fp16"
    invariant: Any  # the target's batch-invariant kernels (exact greedy output in bf16) or torch's stock ones
    drafter: Any  # a DrafterKind value
    draft_precision: Any  # "default", "fp32", "bf16", "int8", "int4" (the drafters that run the draft model)
    options: dict[str, Any]  # the strategies' own options (OPTION_DEFAULTS' names, in order): early exit's layer,
    # suffix decoding's, lookahead decoding's
    k: Any
    tree: Any  # a token tree: "" (a chain), "3-2-1-1" or "dynamic:16" (treeshape.parse_tree)
    policy: Any  # a KPolicy label
    confidence: Any  # the draft-confidence policy's threshold
    temperature: Any
    top_p: Any
    max_new_tokens: Any
    seed: Any
    prompt: Any

    @classmethod
    def named(cls, **values: Any) -> "Controls":
        """From values by name, the strategies' options among them (one not given: its default)."""
        unknown = set(values) - set(NAMES)
        if unknown:
            raise TypeError(f"not a control: {', '.join(sorted(unknown))}")
        options = {name: values.pop(name, default) for name, default in OPTION_DEFAULTS.items()}
        return cls(**values, options=options)

    @classmethod
    def of(cls, *values: Any) -> "Controls":
        """From the inputs' values, in the order of as_inputs()."""
        if len(values) != len(NAMES):
            raise TypeError(f"{len(NAMES)} controls' values expected, got {len(values)}")
        return cls.named(**dict(zip(NAMES, values)))

    def values(self) -> dict[str, Any]:
        """Every control by name (NAMES), the strategies' options among them."""
        out: dict[str, Any] = {}
        for f in fields(self):
            out |= self.options if f.name == "options" else {f.name: getattr(self, f.name)}
        return out

    def as_inputs(self) -> list:
        return list(self.values().values())

    def but(self, **changes: Any) -> "Controls":
        return Controls.named(**(self.values() | changes))


NAMES = tuple(
    name for f in fields(Controls) for name in (OPTION_DEFAULTS if f.name == "options" else (f.name,))
)  # the controls' names in the page's order (the API's inputs)
N_CONTROLS = len(NAMES)


def read_spec(c: Controls, explain: int = 0) -> RunSpec:
    """The shared controls' values -> a checked RunSpec; a PlaygroundError names the first bad value.
    The custom model ids, when filled, override the pair's; a model spec is checked (resolved) before
    anything loads, the draft only for the drafter that uses it."""
    decode = DecodeConfig(
        max_new_tokens=c.max_new_tokens,
        k=c.k,
        policy=parse_policy(c.policy),
        temperature=c.temperature,
        top_p=c.top_p,
        seed=c.seed,
        explain=explain,
        confidence=c.confidence,
        tree=c.tree,
    )
    drafter = parse_drafter(c.drafter, c.draft_precision, c.options)
    catalog = models.get_pair(c.pair)
    target = parse_text(c.target_id, "The target model id") or catalog.target
    draft = parse_text(c.draft_id, "The draft model id") or catalog.draft
    pair = PairSpec(catalog.name, target, draft, parse_precision(c.target_precision), parse_invariant(c.invariant))
    spec = RunSpec(pair, drafter, decode, c.prompt)  # checks the prompt
    models.resolve(target)
    if drafter.needs_draft_model:
        models.resolve(draft)
    return spec


def gradio_progress(bar: Any, check: Callable[[], None] | None = None) -> Progress:
    """The runner's progress(message, fraction) on a gr.Progress; with `check` (a jobs.Listener's), called
    first at each report, so that a job nobody listens to ends there."""

    def report(message: str, fraction: float) -> None:
        if check is not None:
            check()
        bar(fraction, desc=message)

    return report


def precision_choices(default: str, options: tuple[str, ...]) -> list[tuple[str, str]]:
    """(label, value) pairs for a precision dropdown: the device default first, named."""
    return [(f"{default} (default)", DEFAULT_PRECISION)] + [(p, p) for p in options]


def checked_by_us(component: gr.components.Component) -> gr.components.Component:
    """Let out-of-range or unlisted API values through Gradio's own checks (whose message does not name the
    field; and they run before the queue's admission check, jobs.admission, where a refusal reaches a
    gradio_client caller as a bare HTTP 400) to the spec's checks, which name it. The browser keeps the
    widget's bounds and choices."""
    component.preprocess = lambda payload: payload
    return component


# ---------------------------------------------------------------- messages


def status_html(message: str, level: str = "info") -> str:
    """The status line; level is info, busy, ok or error. The message is escaped."""
    return f'<div class="status status-{level}" role="status">{html.escape(message)}</div>'


MAX_MESSAGE_CHARS = 1_000  # a message longer than this is cut (the spec's messages quote values short: errors.shown)


def unexpected(exc: BaseException) -> str:
    """The status line for an error nobody planned for: its type and first line, no traceback, and no
    server paths (an absolute path in the message becomes "…")."""
    line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    line = _cut(without_paths(line))
    return status_html(f"Something went wrong: {type(exc).__name__}: {line}".rstrip(": "), "error")


def error_status(exc: BaseException) -> str:
    """A PlaygroundError's own message (it names the field), anything else as `unexpected`; either way without
    server paths and at most MAX_MESSAGE_CHARS long. A job that ended on purpose (Stop, nobody listening) is news,
    not an error."""
    if not isinstance(exc, PlaygroundError):
        return unexpected(exc)
    return status_html(_cut(without_paths(str(exc))), "info" if isinstance(exc, Ended) else "error")


def _cut(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + " …"


# ---------------------------------------------------------------- the Run tab's outputs


class View(NamedTuple):
    """What the Run tab's callbacks return, in the order of its outputs. gr.skip() = unchanged."""

    status: Any
    tokens: Any
    compare: Any
    summary: Any
    acceptance: Any
    latency: Any
    histogram: Any
    positions: Any
    tree: Any  # the latest token-tree round ("" for a chain)
    csv: Any
    json: Any


def unchanged(**changes: Any) -> View:
    values = {name: gr.skip() for name in View._fields}
    values.update(changes)
    return View(**values)


# ---------------------------------------------------------------- page text


def load_examples(path: Path = PROMPTS_FILE) -> list[dict]:
    """[{"category", "title", "prompt"}] from assets/prompts.json."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def pair_info(name: str) -> str:
    """The chosen pair's models, under the dropdown."""
    try:
        pair = models.get_pair(name)
    except PlaygroundError as exc:
        return html.escape(str(exc))
    note = f"<br>{html.escape(pair.note)}" if pair.note else ""
    draft, target = models.display_name(pair.draft), models.display_name(pair.target)
    return (
        f'<div class="pair-info">draft <code>{html.escape(draft)}</code> → '
        f"target <code>{html.escape(target)}</code>{note}</div>"
    )


def pair_drafter(name: str, drafter: str) -> str:
    """The drafter to show once a pair is picked: a cross-tokenizer pair's draft model needs the
    cross-tokenizer drafter, a same-tokenizer pair's the plain one; draft-free drafters stay."""
    try:
        wanted = models.get_pair(name).drafter.value
    except PlaygroundError:
        return drafter
    pair_drafters = [kind.value for kind, s in decoding.REGISTRY.items() if s.pair_draft]
    return wanted if drafter in pair_drafters else drafter
