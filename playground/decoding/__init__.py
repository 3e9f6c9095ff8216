"""Drafting strategies: one protocol (playground/core/draft.py), one module per strategy, and the one registry.

The way transformers' candidate generators and vLLM's proposers are separated from the verifier: a strategy
proposes (a chain of draft tokens, or a token tree), the engine has the target verify it in one pass and keeps
the accepted prefix, and the engine names no strategy. This module is the registry: each DrafterKind with the
factory that builds its drafter, what it can do, its options (their command-line names, the page's widgets) and
its peers (how transformers and vLLM run it, or "none"; hf_generate and speculative_config build what each is
given): the UI, the benchmark, the export and the spec read these instead of naming a kind. It imports no torch:
each kind's entry, options and factory live in strategies/ (one module a kind; options.py: the generic types), a factory importing its drafter module
when it is called.

    cache.py       the draft KV-cache helpers
    chain.py       a chain's draft (ChainDraft) and how it is verified: one target pass, the chain rule, its record
    model.py       a draft model drafts k tokens, one forward each, on its own KV cache
    early_exit.py  the target's first layers as the draft model (self-speculation)
    self_quant.py  the target's own int4 (or int8) copy as the draft model (quantised self-speculation)
    lookup.py      prompt lookup (n-grams of the sequence); the target alone (no draft)
    cross.py       a draft model with its own tokenizer, translated through text
    staged.py      prompt lookup drafts for the draft model, which drafts for the target
    tree.py        a token tree from a model drafter, verified in one pass with a tree mask
    candidates.py  deterministic candidate trees (from a data store, p one-hot), verified in one pass
    suffix.py      suffix decoding: a suffix tree of the prompt, the output (and the session's earlier outputs)
    lookahead.py   lookahead decoding: the target's own Jacobi window fills an n-gram pool, verified in the same pass
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Protocol

from playground.core.config import DrafterKind
from playground.decoding.options import NONE, Context, HFGenerate, HFObject, Peer, Strategy, Widget
from playground.decoding.strategies import MODULES
from playground.core.errors import PlaygroundError, shown
from playground.core.progress import Progress, quiet

if TYPE_CHECKING:
    from playground.core.draft import Drafter
    from playground.models import LoadedPair
    from playground.core.treeshape import TreeShape
    from playground.engine.treesize import TreeCosts

__all__ = [
    "NONE",
    "Context",
    "HFGenerate",
    "HFObject",
    "Peer",
    "Strategy",
    "Widget",
    "REGISTRY",
    "DRAFTERS",
    "BASELINE",
    "kind_of",
    "strategy",
    "benched",
    "peered",
    "register",
    "make_drafter",
    "speculative_config",
    "hf_generate",
]

REGISTRY: dict[Enum, Strategy] = {m.STRATEGY.kind: m.STRATEGY for m in MODULES}

DRAFTERS = tuple(kind for kind, s in REGISTRY.items() if s.pickable)  # what a user can pick, in this order
BASELINE = DrafterKind.TARGET_ALONE  # no draft: what every speedup is measured against (spec.DrafterSpec.target_alone)


def kind_of(value: object) -> Enum:
    """The registered kind that `value` is or names (a kind, or its value); an unknown one is refused."""
    for kind in REGISTRY:
        if value is kind or value == kind.value:
            return kind
    names = [k.value for k in DrafterKind] + [k.value for k in REGISTRY if not isinstance(k, DrafterKind)]
    raise PlaygroundError(f"Unknown drafter {shown(value)}; choose one of: {', '.join(names)}.")


def strategy(kind: Enum | str) -> Strategy:
    return REGISTRY[kind_of(kind)]


def benched(peer: str, adapter: str) -> Enum:
    """Whose row a peer's benchmark run stands beside: the first registered kind that the peer ("hf" or "vllm") runs
    by `adapter` in the benchmark (Peer.bench): benched("vllm", "ngram") is prompt lookup."""
    return next(k for k, s in REGISTRY.items() if getattr(s, peer).adapter == adapter and getattr(s, peer).bench)


def peered(peer: str, adapter: str) -> Enum:
    """The first registered kind that the peer ("hf" or "vllm") runs by `adapter`: whose Strategy reads what that
    adapter needs (peered("vllm", "suffix") is suffix decoding). An adapter no strategy has is refused."""
    for kind, s in REGISTRY.items():
        if getattr(s, peer).adapter == adapter:
            return kind
    raise PlaygroundError(f"No strategy runs on {peer} by {shown(adapter)}.")


def register(new: Strategy) -> None:
    """Add a strategy, its kind a str Enum member of its own (a built-in's is a DrafterKind): the spec, the runner
    and the engine take it as they take the built-ins. Not a choice in the UI or the CLI (DRAFTERS is theirs)."""
    if any(new.kind.value == kind.value for kind in REGISTRY):
        raise PlaygroundError(f"A strategy named {new.kind.value!r} is registered already.")
    REGISTRY[new.kind] = new


def unregister(kind: Enum) -> None:
    """Remove a strategy that register() added (the built-ins stay)."""
    if isinstance(kind, DrafterKind):
        raise PlaygroundError(f"{kind.value!r} is a built-in strategy.")
    REGISTRY.pop(kind, None)


def for_pair(chosen: DrafterKind, pair_kind: DrafterKind) -> DrafterKind:
    """What "draft model" means for a pair whose draft needs `pair_kind` (models.Pair.drafter): its own draft,
    through the drafter its tokenizers need. Every other choice stays (the cross-tokenizer drafter may run a
    same-tokenizer pair: what the text route costs)."""
    return pair_kind if chosen is DrafterKind.DRAFT_MODEL else chosen


def two_tokenizers(pair_kind: Enum | str) -> bool:
    """Whether a pair whose draft runs through `pair_kind` (models.Pair.drafter) is a cross-tokenizer pair: its
    drafter runs a draft model that translates between two tokenizers."""
    s = strategy(pair_kind)
    return s.draft_model and not s.same_tokenizer


class Chosen(Protocol):
    """What make_drafter reads of a drafter's description (run.spec.DrafterSpec, a layer above: named here only by
    what it holds, so that the registry imports nothing of the run)."""

    kind: Enum
    options: Any


def speculative_config(kind: Enum | str, options: Any, k: int, draft: str | None = None) -> dict | None:
    """vLLM's speculative_config for a strategy, the one builder (the export's snippet and server command, vLLM's
    engine): vLLM's method (Strategy.vllm.adapter), k, the draft's model where the strategy runs one, and what its
    options add (Peer.config). None where vLLM runs the target alone or has no equivalent."""
    s = strategy(kind)
    if s.vllm.adapter in (NONE, BASELINE.value):
        return None
    config: dict = {"method": s.vllm.adapter, "num_speculative_tokens": int(k)}
    if s.draft_model:
        config["model"] = draft
    return config | (s.vllm.config(options) if s.vllm.config else {})


def hf_generate(kind: Enum | str, options: Any, k: int | None) -> HFGenerate:
    """transformers' generate() for a strategy, the one builder (the export's snippet, the bench's HF peer), from its
    Strategy.hf: assistant_model= the pair's draft where it drafts (Peer.drafts), with each model's tokenizer where the
    draft has its own (universal assisted decoding), k where no model drafts (Peer.k), what its options add
    (Peer.config), and the code that readies generate (Peer.setup). No arguments: the target alone."""
    s = strategy(kind)
    peer, arguments = s.hf, {}
    if peer.drafts is HFObject.DRAFT:
        arguments["assistant_model"] = HFObject.DRAFT
        if two_tokenizers(kind):
            arguments |= {"tokenizer": HFObject.TOKENIZER, "assistant_tokenizer": HFObject.DRAFT_TOKENIZER}
    if peer.k:
        arguments[peer.k] = k
    arguments |= peer.config(options) if peer.config else {}
    return HFGenerate(arguments, peer.drafts, peer.setup(options) if peer.setup else ())


def make_drafter(
    spec: Chosen,
    pair: LoadedPair,
    confidence: float = 0.0,
    tree: TreeShape | None = None,
    encode: Callable[[object], list[int]] | None = None,
    kept: Any = None,
    progress: Progress = quiet,
    costs: TreeCosts | None = None,
) -> Drafter:
    """The drafter a DrafterSpec describes, on a loaded pair. confidence > 0: a model drafter (draft model,
    early exit) stops a draft when its top probability falls under it (KPolicy.CONFIDENCE). tree: draft this
    token tree instead of a chain (the strategy's own, or a TreeDrafter around its model drafter).
    encode(tokenizer): the run's prompt as that tokenizer's ids, for a draft with its own tokenizer. kept: the
    session's state for this kind (Strategy.session: suffix decoding's memory of earlier runs). progress: where a
    long build says so. costs: what a sized tree plans with (treesize.TreeCosts: the target's and the draft's
    measured passes)."""
    s = REGISTRY[spec.kind]
    if s.draft_model and pair.draft is None:
        raise PlaygroundError(f"The '{spec.kind.value}' drafter needs a pair with a draft model.")
    drafter = s.build(spec.options, pair, Context(confidence, encode, tree if s.own_tree else None, kept, progress))
    if tree is None or s.own_tree:
        return drafter
    if not s.tree:
        raise PlaygroundError(f"A token tree needs a model drafter; '{drafter.name}' drafts a chain only.")
    if getattr(spec.options, "why_no_tree", ""):
        raise PlaygroundError(spec.options.why_no_tree)
    from playground.decoding.tree import TreeDrafter

    return TreeDrafter(drafter, tree, pair.target, costs)
