"""The types at the bottom of decoding: what a drafter proposes (Draft, a token Tree), the Drafter protocol, and what
the acceptance rule decides (Verdict). acceptance.py, the engine, batch.py and the strategies (playground/decoding/)
all import them from here; this module imports none of them (nor torch: the tensors are only named in types).

A drafter proposes up to k tokens after the current sequence and is told how many the target kept, like
transformers' candidate generators (get_candidates / update_candidate_strategy) and vLLM's proposers. The
engine calls, each round: depth(k) (how deep a draft to ask for), propose(), the draft's verify() (the target's
one pass and the acceptance rule), observe(), annotate(). Everything but propose has a default here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch
    from transformers import DynamicCache, PreTrainedModel

    from playground.core.config import DecodeConfig, SamplingParams
    from playground.core.records import RoundRecord


@dataclass
class Verdict:
    """What verification decided, still on the device (one host sync reads it). For one sequence the tensors are
    scalars and u is (k,); for a batch (acceptance.batch_greedy) each has a leading row dimension B."""

    num_accepted: torch.Tensor  # () long (or (B,)): n, how many draft tokens were kept
    next_token: torch.Tensor  # () long (or (B,)): the correction (n < k) or bonus (n == k) token
    u: torch.Tensor | None  # (k,) the uniform draws, sampling only


@dataclass
class Tree:
    """A drafted tree, nodes in breadth-first order (a parent before its children)."""

    tokens: list[int]  # node tokens
    parents: list[int]  # parent node per node, -1 = the root (the sequence's last token)
    depths: list[int]  # 1 for the root's children
    p_rows: torch.Tensor  # (1 + T, V): p of the root's children (row 0) and of node i's (row 1 + i); 0 if not drafted
    fed: int = 0  # nodes the draft model has run (the first `fed`, every depth but the last): its cache holds them
    children: list[list[int]] = field(default_factory=list)  # per row (root = 0, node i = 1 + i), in draw order

    def __post_init__(self) -> None:
        self.children = [[] for _ in range(len(self.tokens) + 1)]
        for i, parent in enumerate(self.parents):
            self.children[parent + 1].append(i)

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass
class Draft:
    """What a drafter proposes: draft tokens and, for a model's draft, their raw logits. Each kind of draft says
    how the target verifies it: a chain (decoding/chain.py: ChainDraft), a token tree (decoding/tree.py: TreeDraft),
    a candidate tree (decoding/candidates.py: CandidateDraft)."""

    tokens: torch.Tensor  # (k',) long, k' <= k (a drafter may stop early); a tree's: its nodes' tokens
    logits: torch.Tensor | None  # (k', V) raw draft logits, None for a deterministic drafter
    lean = False  # whether verify takes the lean forward's cache (kernels.step.target_cache); else HF's DynamicCache

    def verify(
        self,
        target: PreTrainedModel,
        cache: DynamicCache,
        ids: torch.Tensor,
        cached: int,
        config: DecodeConfig,
        generator: torch.Generator | None,
    ) -> RoundRecord:
        """The target scores ids[:, cached:] and the drafts in one pass; the acceptance rule (acceptance.py) keeps
        a prefix; the target's cache keeps the sequence and that prefix. The record's round, prefill and timings
        are the engine's to fill in."""
        raise NotImplementedError(f"{type(self).__name__} does not say how it is verified")


class Drafter(Protocol):
    """A draft source. Subclass it to inherit the defaults (no state, nothing to add to a record)."""

    name: str

    def reset(self) -> None:
        """Forget everything: a new sequence starts."""

    def depth(self, k: int) -> int:
        """The draft length to ask for when the k policy says k (a token tree has a depth of its own)."""
        return k

    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        """Up to k tokens to follow ids (1, L)."""
        ...

    def observe(self, num_accepted: int) -> None:
        """The target kept the first num_accepted tokens of the last proposal."""

    def annotate(self, record: RoundRecord) -> None:
        """Add the strategy's own view of the round to its record (RoundRecord.extras); the engine calls it
        after observe()."""

    def nbytes(self) -> int:
        """Bytes of what it keeps for its sequence (its KV cache, its tables), without walking them: the sessions'
        budget counts a step-through run by it. Never the shared model's weights. 0: it keeps nothing."""
        return 0
