"""Drafting strategies: one protocol (base.py), one module per strategy, and the one registry.

The way transformers' candidate generators and vLLM's proposers are separated from the verifier: a strategy
proposes (a chain of draft tokens, or a token tree), the engine has the target verify it in one pass and keeps
the accepted prefix, and the engine names no strategy. This module is the registry: each DrafterKind with the
factory that builds its drafter and what it can do (the UI, the benchmark, the export and the spec read these
capabilities instead of branching on the kind). It imports no torch: a factory imports its strategy's module
when it is called.

    base.py        the Drafter protocol (propose, observe, annotate), Draft, the draft KV-cache helpers
    chain.py       how a chain is verified: one target pass, the chain rule (sampling.py), the round's record
    model.py       a draft model drafts k tokens, one forward each, on its own KV cache
    early_exit.py  the target's first layers as the draft model (self-speculation)
    lookup.py      prompt lookup (n-grams of the sequence); the target alone (no draft)
    cross.py       a draft model with its own tokenizer, translated through text
    staged.py      prompt lookup drafts for the draft model, which drafts for the target
    tree.py        a token tree from a model drafter, verified in one pass with a tree mask
    candidates.py  deterministic candidate trees (from a data store, p one-hot), verified in one pass
    suffix.py      suffix decoding: a suffix tree of the prompt, the output (and the session's earlier outputs)
    lookahead.py   lookahead decoding: the target's own Jacobi window fills an n-gram pool, verified in the same pass
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Callable

from playground.config import DrafterKind
from playground.errors import PlaygroundError, shown

if TYPE_CHECKING:
    from playground.decoding.base import Drafter
    from playground.models import LoadedPair
    from playground.decoding.suffix import SuffixMemory
    from playground.spec import DrafterSpec
    from playground.treeshape import TreeShape


@dataclass(frozen=True)
class Build:
    """What a factory builds a drafter from: the drafter's spec, the loaded pair, the confidence threshold
    (0: off; KPolicy.CONFIDENCE), how the run encodes its prompt for a given tokenizer (a draft with its
    own tokenizer encodes the prompt its own way), the token tree for a strategy that drafts its own
    (Strategy.own_tree), and the session's memory of earlier runs (suffix decoding, when the spec asks)."""

    spec: DrafterSpec
    pair: LoadedPair
    confidence: float = 0.0
    encode: Callable[[object], list[int]] | None = None
    tree: TreeShape | None = None
    memory: SuffixMemory | None = None


@dataclass(frozen=True)
class Strategy:
    """A DrafterKind's factory and capabilities."""

    kind: DrafterKind
    build: Callable[[Build], Drafter]
    model: str = ""  # the model that drafts: "draft" (the pair's draft model), "target" (its first layers), "" none
    same_tokenizer: bool = False  # the draft's token ids must be the target's (models.check_compatible)
    pair_draft: bool = False  # the pair's draft model on its own: which of these a pair names (models.Pair.drafter)
    tree: bool = False  # can draft a token tree (DecodeConfig.tree)
    own_tree: bool = False  # builds its tree itself (Build.tree), rather than through a TreeDrafter around a model
    batch: bool = False  # the batched engine (batch.py) can run it
    pickable: bool = True  # a choice in the UI, the API and the CLI
    ran: str = ""  # what drafted, for the summary panel ({draft} / {target}: the precisions that ran)
    options: str = (
        ""  # the prefix of the DrafterSpec fields its drafter reads ("suffix_", "lookahead_"; spec_draftfree)
    )

    @property
    def draft_model(self) -> bool:
        """Whether it runs the pair's draft model."""
        return self.model == "draft"


# ---------------------------------------------------------------- the factories (each imports its module)


def _draft_model(b: Build) -> Drafter:
    from playground.decoding import vocab
    from playground.decoding.model import ModelDrafter

    if b.spec.draft_vocab and vocab.why_not(b.pair.draft, b.spec.draft_vocab):
        raise PlaygroundError(
            f"A draft vocabulary of {b.spec.draft_vocab:,} tokens does not apply: "
            f"{vocab.why_not(b.pair.draft, b.spec.draft_vocab)}."
        )
    return ModelDrafter(b.pair.draft, b.confidence, b.spec.draft_vocab)


def _early_exit(b: Build) -> Drafter:  # shares the target's weights: its precision, no copy
    from playground.decoding.early_exit import EarlyExitDrafter

    return EarlyExitDrafter(b.pair.target, b.spec.exit_layer, b.confidence)


def _prompt_lookup(b: Build) -> Drafter:
    from playground.decoding.lookup import PromptLookupDrafter

    return PromptLookupDrafter(max_ngram=b.spec.max_ngram)


def _target_alone(b: Build) -> Drafter:
    from playground.decoding.lookup import NoDrafter

    return NoDrafter()


def _cross(b: Build) -> Drafter:  # the confidence stop does not apply: the draft drafts greedily
    from playground.decoding.cross import CrossTokenizerDrafter

    draft_tok = b.pair.draft_tokenizer or b.pair.tokenizer
    return CrossTokenizerDrafter(b.pair.draft, draft_tok, b.pair.tokenizer, b.encode(draft_tok) if b.encode else None)


def _staged(b: Build) -> Drafter:  # a staged draft is always k long: no confidence stop
    from playground.decoding.staged import StagedDrafter

    return StagedDrafter(b.pair.draft, max_ngram=b.spec.max_ngram)


def _suffix(b: Build) -> Drafter:  # the k policy's k caps a chain; a tree's shape caps a tree
    from playground.decoding.suffix import SuffixDrafter

    s = b.spec
    return SuffixDrafter(
        s.suffix_depth, s.suffix_factor, s.suffix_min_prob, b.tree, b.memory if s.suffix_memory else None, b.pair.target
    )


def _lookahead(b: Build) -> Drafter:  # the target drafts for itself: no draft model, no confidence stop
    from playground.decoding.lookahead import LookaheadDrafter

    s = b.spec
    return LookaheadDrafter(
        b.pair.target, s.lookahead_window, s.lookahead_ngram, s.lookahead_guesses, s.lookahead_prompt_pool
    )


REGISTRY: dict[DrafterKind, Strategy] = {
    s.kind: s
    for s in (
        Strategy(
            DrafterKind.DRAFT_MODEL,
            _draft_model,
            model="draft",
            same_tokenizer=True,
            pair_draft=True,
            tree=True,
            batch=True,
            ran="draft {draft}",
        ),
        Strategy(
            DrafterKind.PROMPT_LOOKUP,
            _prompt_lookup,
            ran="draft: prompt lookup (no model)",
        ),
        Strategy(
            DrafterKind.EARLY_EXIT,
            _early_exit,
            model="target",
            tree=True,
            ran="draft: the target's first layers ({target})",
        ),
        Strategy(
            DrafterKind.CROSS_TOKENIZER,
            _cross,
            model="draft",
            pair_draft=True,
        ),
        Strategy(
            DrafterKind.STAGED,
            _staged,
            model="draft",
            same_tokenizer=True,
            ran="draft {draft}, its drafts by prompt lookup",
        ),
        Strategy(
            DrafterKind.SUFFIX,
            _suffix,
            tree=True,
            own_tree=True,
            ran="draft: a suffix tree of the text (no model)",
            options="suffix_",
        ),
        Strategy(
            DrafterKind.LOOKAHEAD,
            _lookahead,
            ran="draft: the target's own Jacobi window, in the same pass ({target})",
            options="lookahead_",
        ),
        Strategy(DrafterKind.TARGET_ALONE, _target_alone, pickable=False),
    )
}

DRAFTERS = tuple(kind for kind, s in REGISTRY.items() if s.pickable)  # what a user can pick, in this order


def kind_of(value: object) -> Enum:
    """The registered kind that `value` is or names (a kind, or its value); an unknown one is refused."""
    for kind in REGISTRY:
        if value is kind or value == kind.value:
            return kind
    names = [k.value for k in DrafterKind] + [k.value for k in REGISTRY if not isinstance(k, DrafterKind)]
    raise PlaygroundError(f"Unknown drafter {shown(value)}; choose one of: {', '.join(names)}.")


def strategy(kind: Enum | str) -> Strategy:
    return REGISTRY[kind_of(kind)]


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


def make_drafter(
    spec: DrafterSpec,
    pair: LoadedPair,
    confidence: float = 0.0,
    tree: TreeShape | None = None,
    encode: Callable[[object], list[int]] | None = None,
    memory: SuffixMemory | None = None,
) -> Drafter:
    """The drafter a DrafterSpec describes, on a loaded pair. confidence > 0: a model drafter (draft model,
    early exit) stops a draft when its top probability falls under it (KPolicy.CONFIDENCE). tree: draft this
    token tree instead of a chain (the strategy's own, or a TreeDrafter around its model drafter).
    encode(tokenizer): the run's prompt as that tokenizer's ids, for a draft with its own tokenizer. memory:
    the session's memory of earlier runs (used by suffix decoding when its spec asks)."""
    s = REGISTRY[spec.kind]
    if s.draft_model and pair.draft is None:
        raise PlaygroundError(f"The '{spec.kind.value}' drafter needs a pair with a draft model.")
    drafter = s.build(Build(spec, pair, confidence, encode, tree if s.own_tree else None, memory))
    if tree is None or s.own_tree:
        return drafter
    if not s.tree:
        raise PlaygroundError(f"A token tree needs a model drafter; '{drafter.name}' drafts a chain only.")
    if spec.draft_vocab:
        raise PlaygroundError("A draft vocabulary subset drafts chains only; a token tree takes the whole vocabulary.")
    from playground.decoding.tree import TreeDrafter

    return TreeDrafter(drafter, tree, pair.target)
