"""The kinds and config types every layer shares, at the bottom of the imports: which drafter (DrafterKind),
how k is chosen (KPolicy), a model's precision, how a token is sampled and how one generation decodes
(DecodeConfig, checked when built). It imports only the other modules of core/ (errors, numbers, treeshape), so
the spec, the strategies, the engine and the views all import it and it imports none of them. Pure: no torch, and
no environment: what the server allows (PLAYGROUND_MAX_NEW_TOKENS) is checked in the run's spec, which reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

from playground.core.errors import PlaygroundError, shown
from playground.core.numbers import is_int, is_real
from playground.core.treeshape import TreeShape, parse_tree

K_MIN, K_MAX = 1, 16  # K_MAX is also treeshape.MAX_TREE_DEPTH, the deepest tree
DEFAULT_CONFIDENCE = 0.4  # the confidence policy's threshold: transformers' assistant_confidence_threshold default
# The challenges' frames name their two methods so (bench.challenges writes them, views.challenges reads them)
BASELINE, SPECULATIVE = "target alone", "speculative"


class DrafterKind(str, Enum):
    """The built-in drafting strategies (decoding/: one module each; the registry maps a kind to its Strategy)."""

    DRAFT_MODEL = "draft model"
    PROMPT_LOOKUP = "prompt lookup"
    EARLY_EXIT = "early exit"
    TARGET_ALONE = "target alone"  # no draft: the autoregressive baseline through the same loop
    # A draft model with its own tokenizer: drafts in its tokens, translated into the target's through
    # text, verified as a deterministic draft (p one-hot: lossless). decoding/cross.py.
    CROSS_TOKENIZER = "cross-tokenizer draft model"
    # Two levels: prompt lookup drafts the draft model's proposals, the draft model keeps what it would have
    # drafted itself, then the target verifies as for the draft model alone. decoding/staged.py.
    STAGED = "staged: prompt lookup → draft model"
    # No draft model: a suffix tree of the prompt and the output (and, when asked, of the session's earlier
    # outputs) proposes the continuations seen most often; a chain or a token tree. decoding/suffix.py.
    SUFFIX = "suffix decoding"
    # No draft model: the target's own Jacobi iterations on a window fill an n-gram pool, whose n-grams are
    # verified in the same pass. decoding/lookahead.py.
    LOOKAHEAD = "lookahead decoding"
    # No second model: the target's own copy with int4 (or int8) Linears drafts for it, on its own KV cache
    # (quantised self-speculation). decoding/self_quant.py.
    SELF_QUANT = "self int4"


@dataclass(frozen=True)
class SamplingParams:
    """How a next token is chosen. temperature == 0 means greedy (argmax)."""

    temperature: float = 0.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class KPolicy(str, Enum):
    """How k (the draft length) is chosen per round; see engine.KSchedule."""

    FIXED = "fixed"
    HEURISTIC = "heuristic"  # transformers' schedule: +2 after a fully accepted round, -1 otherwise
    # the calibrated policy: the k with the best expected rate for what this run measured (the cost profile of
    # the warm-up), with a floor: it stops drafting when drafting does not pay; reproducible for a seed
    THEORY = "theory"
    # k is the most a draft may hold: a model draft stops as soon as its top probability falls under
    # DecodeConfig.confidence (transformers' assistant_confidence_threshold)
    CONFIDENCE = "confidence"

    @property
    def label(self) -> str:
        return {
            "fixed": "fixed k",
            "heuristic": "adaptive (heuristic)",
            "theory": "adaptive (theory)",
            "confidence": "adaptive (draft confidence)",
        }[self.value]


class Precision(str, Enum):
    """A model's numeric precision. int8 (per output row) and int4 (groups of 32 along K) are for a draft on CPU only:
    int4 needs the batch-invariant kernels (playground/kernels), int8 runs on torch's dynamic quantisation without."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    INT8 = "int8"
    INT4 = "int4"


TARGET_PRECISIONS = (Precision.FP32, Precision.BF16, Precision.FP16)


@dataclass(frozen=True)
class DecodeConfig:
    """How one generation decodes. Checked when built: a bad value raises PlaygroundError naming it.

    Its defaults are the playground's, written here only: the page's controls start at them, and the link, the
    API, the benchmark and the command line read them (DecodeConfig.default, DecodeConfig.within_limit)."""

    max_new_tokens: int = 128
    k: int = 8  # draft length; with an adaptive policy, the starting value (the confidence policy's cap: levers.md)
    policy: KPolicy = KPolicy.CONFIDENCE  # the default: the fastest policy measured here (docs/levers.md)
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    record: bool = True  # compute p and q of every draft token for the views
    explain: int = 0  # > 0: also record that many top alternatives per position and the residual (step-through)
    confidence: float = DEFAULT_CONFIDENCE  # KPolicy.CONFIDENCE: a model draft stops when its top p falls under this
    tree: TreeShape | None = None  # draft a token tree instead of a chain ("3-2-1-1", "dynamic:16"; parse_tree)

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)
        if not is_int(self.k) or not K_MIN <= self.k <= K_MAX:
            raise PlaygroundError(
                f"k (draft length) must be a whole number from {K_MIN} to {K_MAX}, got {shown(self.k)}."
            )
        if not is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise PlaygroundError(f"max_new_tokens must be a whole number from 1, got {shown(self.max_new_tokens)}.")
        if not is_real(self.temperature) or not 0 <= self.temperature <= 2:
            raise PlaygroundError(f"temperature must be from 0 to 2 (0 = greedy), got {shown(self.temperature)}.")
        if not is_real(self.top_p) or not 0 < self.top_p <= 1:
            raise PlaygroundError(f"top_p must be in (0, 1], got {shown(self.top_p)}.")
        set_("policy", enum_value(KPolicy, self.policy, "k policy"))
        if not is_int(self.top_k) or self.top_k < 0:
            raise PlaygroundError(f"top_k must be a whole number >= 0 (0 = off), got {shown(self.top_k)}.")
        if not is_int(self.seed) or not 0 <= self.seed < 2**63:
            raise PlaygroundError(f"seed must be a whole number from 0 to 2**63 - 1, got {shown(self.seed)}.")
        if not is_int(self.explain) or not 0 <= self.explain <= 16:
            raise PlaygroundError(f"explain must be a whole number from 0 to 16, got {shown(self.explain)}.")
        set_("confidence", parse_confidence(self.confidence))
        set_("tree", parse_tree(self.tree))
        for name in ("k", "max_new_tokens", "top_k", "seed", "explain"):
            set_(name, int(getattr(self, name)))
        set_("temperature", float(self.temperature))
        set_("top_p", float(self.top_p))
        set_("record", bool(self.record))

    @staticmethod
    def default(name: str) -> Any:
        """One field's default, read without building a config."""
        return next(f.default for f in fields(DecodeConfig) if f.name == name)

    @classmethod
    def within_limit(cls, limit: int) -> "DecodeConfig":
        """The defaults, with max_new_tokens lowered to `limit` (the server's: PLAYGROUND_MAX_NEW_TOKENS) where
        that is below the default: what the page starts at and the app warms up with."""
        return cls(max_new_tokens=min(cls.default("max_new_tokens"), limit))

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p)

    @property
    def adaptive(self) -> bool:
        return self.policy is not KPolicy.FIXED

    @property
    def k_label(self) -> str:
        """k as the tables show it: "4", the policy's name, or the tree's shape ("tree 3-2-1-1")."""
        if self.tree is not None:
            return f"tree {self.tree.label}"
        if self.policy is KPolicy.FIXED:
            return str(self.k)
        bare = self.k == DecodeConfig.default(
            "k"
        )  # as spec.parse_k reads it: a policy's name alone starts at the default k
        return self.policy.value if bare else f"{self.policy.value}:{self.k}"


def parse_confidence(value: object) -> float:
    """The confidence policy's threshold: a number (or its text) in [0, 1); 0 never stops a draft early."""
    c = value
    if isinstance(value, str):
        try:
            c = float(value)
        except ValueError:
            pass
    if not is_real(c) or not 0 <= c < 1:
        raise PlaygroundError(
            f"The draft confidence threshold must be a number from 0 to below 1 "
            f"(0 = never stop a draft early), got {shown(value)}."
        )
    return float(c)


def enum_value(cls: type[Enum], value: object, what: str) -> Enum:
    """`value` as a member of the enum `cls` (a member or its value); an unknown one is refused, naming `what`."""
    try:
        return cls(value)
    except ValueError:
        raise PlaygroundError(
            f"Unknown {what} {shown(value)}; choose one of: {', '.join(m.value for m in cls)}."
        ) from None
