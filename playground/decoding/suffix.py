"""Suffix decoding (Oliaro et al. 2024, "SuffixDecoding"; vLLM's `method: "suffix"` through Snowflake's Arctic
Inference): no draft model. A suffix tree counts every stretch of up to `depth` tokens of the prompt and the
output so far (and, when the user asks, of earlier runs' outputs in the session); the sequence's last tokens are
looked up in it and the continuations seen most often after them are proposed.

The rule of a round, as Arctic Inference's `speculate` (vLLM passes it num_speculative_tokens,
suffix_decoding_max_tree_depth, _max_spec_factor and _min_token_prob):
- for each match length m = 1, 2, ... (the sequence's last m tokens, while they occur in the tree; m < depth),
  a draft grows from the matched node: a chain follows the most frequent child, each step multiplying the
  running estimate by count(child) / count(parent), and stops once that estimate falls under min_prob (vLLM's
  min_token_prob), at the tree's depth, or at max_tokens = min(k, floor(factor * m)) tokens (vLLM's
  max_spec_factor: a short match earns a short draft);
- a tree (DecodeConfig.tree given) grows best first by the same estimate: the node budget min(the shape's nodes,
  floor(factor * m)), a static shape's children per depth and depth, the dynamic shape's budget;
- each draft's score is the sum of its tokens' estimates (its expected accepted length); the best score over the
  match lengths and the two stores (this run, session memory) is proposed; a tie goes to the longer match, and
  to this run over the memory.
So k is adaptive: 0 where nothing matches, long after a long match of a text seen before, short where the
continuations seen disagree. The k policy's k is the cap (num_speculative_tokens).

Lossless like every drafter: the draft is deterministic, p one-hot (a chain through chain.verify, a tree through
candidates.CandidateDraft). Pure Python on lists of ints; torch only for the draft's tensor.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from playground.core.config import DrafterKind
from playground.decoding.chain import ChainDraft
from playground.decoding.candidates import CandidateDraft
from playground.decoding.tree import check_tree_model
from playground.core.draft import Draft, Drafter, Tree
from playground.core.records import RoundRecord, SuffixExtras
from playground.core.config import SamplingParams
from playground.core.treeshape import TreeShape

THIS_RUN, MEMORY = "this run", "session memory"
MEMORY_RUNS = 64  # earlier runs a session's memory keeps (oldest forgotten first; vLLM: max_cached_requests)
# A node's bytes in CPython: its dict of children, its slots in three lists and its ints. An estimate that
# tests/ui/test_budget.py checks against tracemalloc; the sessions' budget (ui/budget.py) counts memories with it
NODE_BYTES = 272
TOKEN_BYTES = 40  # a token kept in `seqs`: its list slot and its int


class SuffixTree:
    """Every stretch of up to `depth` tokens of the sequences added, as a trie with occurrence counts: a suffix
    tree cut at a depth. Sequences grow by extend(); count(node) is how often its stretch occurred."""

    def __init__(self, depth: int):
        self.depth = depth
        self.children: list[dict[int, int]] = [{}]
        self.count: list[int] = [0]
        self.level: list[int] = [0]  # a node's depth: its stretch's length
        self.seqs: dict[int, list[int]] = {}
        self._active: dict[int, list[int]] = {}  # per sequence: the nodes of the stretches ending at its last token

    def extend(self, seq: int, tokens: list[int]) -> None:
        """Append tokens to sequence `seq` (a new id starts a sequence): each stretch ending at each new token
        is counted once more."""
        active = self._active.setdefault(seq, [])
        own = self.seqs.setdefault(seq, [])
        for token in tokens:
            grown = []
            for node in [0] + active:
                if self.level[node] >= self.depth:
                    continue
                child = self.children[node].get(token)
                if child is None:
                    child = self.children[node][token] = len(self.count)
                    self.children.append({})
                    self.count.append(0)
                    self.level.append(self.level[node] + 1)
                self.count[child] += 1
                grown.append(child)
            active = grown
            own.append(token)
        self._active[seq] = active

    def nbytes(self) -> int:
        """About what the tree takes (NODE_BYTES a node, TOKEN_BYTES a token kept), from its lengths: no walk."""
        return len(self.count) * NODE_BYTES + sum(len(s) for s in self.seqs.values()) * TOKEN_BYTES

    def matches(self, context: list[int]) -> list[tuple[int, int]]:
        """(m, node) for the context's last m tokens, m = 1, 2, ... while they occur (m < depth)."""
        out = []
        for m in range(1, min(len(context), self.depth - 1) + 1):
            node = 0
            for token in context[len(context) - m :]:
                node = self.children[node].get(token)
                if node is None:
                    return out
            out.append((m, node))
        return out

    def best_child(self, node: int) -> tuple[int, int] | None:
        """(token, child) seen most often after the node's stretch (the first seen among equals)."""
        kids = self.children[node]
        return max(kids.items(), key=lambda kv: self.count[kv[1]]) if kids else None


class SuffixMemory:
    """Earlier runs' outputs in one session (the UI keeps one per browser session): a suffix tree over them.
    Opt-in per run (the suffix strategy's options.suffix_memory): runs stay independent unless the user asks."""

    def __init__(self, depth: int = 24, runs: int = MEMORY_RUNS):
        self.runs, self.tree, self._next = runs, SuffixTree(depth), 0

    def begin(self) -> int:
        """A new run's sequence id; the oldest runs are forgotten (the tree rebuilt without them) past `runs`."""
        if len(self.tree.seqs) >= self.runs:
            keep = sorted(self.tree.seqs)[len(self.tree.seqs) - self.runs + 1 :]
            old, self.tree = self.tree, SuffixTree(self.tree.depth)
            for seq in keep:
                self.tree.extend(seq, old.seqs[seq])
        self._next += 1
        return self._next - 1

    def add(self, seq: int, tokens: list[int]) -> None:
        self.tree.extend(seq, tokens)

    def nbytes(self) -> int:
        """About what the memory takes: its tree's (SuffixTree.nbytes)."""
        return self.tree.nbytes()

    @property
    def about(self) -> str:
        """What it is, for the note when the sessions' budget drops it."""
        n = len(self.tree.seqs)
        return f"suffix decoding's memory of your earlier runs ({n} run{'s' * (n != 1)})"


@dataclass
class Proposal:
    """A draft from one match: tokens (a chain) or a tree's nodes with their parents, per node the estimate and
    the count, its score (the sum of the estimates), the match length and the store it came from."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # -1: the sequence's last token
    prob: list[float] = field(default_factory=list)
    count: list[int] = field(default_factory=list)
    match: int = 0
    store: str = ""

    @property
    def score(self) -> float:
        return float(sum(self.prob))


def chain(tree: SuffixTree, node: int, limit: int, min_prob: float) -> Proposal:
    """Follow the most frequent child from `node` while the running estimate stays >= min_prob."""
    out, estimate = Proposal(), 1.0
    while len(out.tokens) < limit and tree.level[node] < tree.depth:
        best = tree.best_child(node)
        if best is None:
            break
        token, child = best
        estimate *= tree.count[child] / tree.count[node]
        if estimate < min_prob:
            break
        out.parents.append(len(out.tokens) - 1)
        out.tokens.append(token)
        out.prob.append(estimate)
        out.count.append(tree.count[child])
        node = child
    return out


def grow_tree(tree: SuffixTree, node: int, budget: int, min_prob: float, shape: TreeShape, depth: int) -> Proposal:
    """Best first by the running estimate: up to `budget` nodes, `depth` levels, a static shape's children per
    level. Nodes come out in the order they were taken: a parent before its children."""
    out = Proposal()
    heap: list[
        tuple[float, int, int, int, int, int]
    ] = []  # (-estimate, order, suffix node, parent index, level, token)
    order = itertools.count()  # equal estimates: the first pushed first
    taken: dict[int, int] = {}  # our node index -> children taken

    def push(from_node: int, parent: int, level: int, estimate: float) -> None:
        if level > depth or tree.level[from_node] >= tree.depth:
            return
        for token, child in tree.children[from_node].items():
            p = estimate * tree.count[child] / tree.count[from_node]
            if p >= min_prob:
                heapq.heappush(heap, (-p, next(order), child, parent, level, token))

    push(node, -1, 1, 1.0)
    while heap and len(out.tokens) < budget:
        neg, _, child, parent, level, token = heapq.heappop(heap)
        if not shape.dynamic and taken.get(parent, 0) >= shape.branching[level - 1]:
            continue
        taken[parent] = taken.get(parent, 0) + 1
        out.tokens.append(token)
        out.parents.append(parent)
        out.prob.append(-neg)
        out.count.append(tree.count[child])
        push(child, len(out.tokens) - 1, level + 1, -neg)
    return out


class SuffixDrafter(Drafter):
    """Suffix decoding: a suffix tree of this run's prompt and output (and optionally of the session's earlier
    outputs) proposes a chain, or a token tree, of the continuations seen most often (the module's docstring)."""

    name = DrafterKind.SUFFIX.value

    def __init__(
        self,
        depth: int = 24,
        factor: float = 1.0,
        min_prob: float = 0.1,
        shape: TreeShape | None = None,
        memory: SuffixMemory | None = None,
        target: PreTrainedModel | None = None,
    ):
        if shape is not None and target is not None:
            check_tree_model(target)
        self.max_depth, self.factor, self.min_prob, self.shape, self.memory = depth, factor, min_prob, shape, memory
        self.reset()

    def reset(self) -> None:
        self.tree = SuffixTree(self.max_depth)
        self.seen = 0  # tokens of the sequence in self.tree
        self.run: int | None = None  # this run's id in the memory, once it has output
        self.last: Proposal | None = None
        self.draft: Draft | None = None

    def depth(self, k: int) -> int:
        return self.shape.depth if self.shape is not None and k > 0 else k

    def nbytes(self) -> int:
        return self.tree.nbytes()  # this run's tree; the session's memory is counted as the session's own

    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        seq = ids[0].tolist()
        self.tree.extend(0, seq[self.seen :])
        self.seen = len(seq)
        best = self.speculate(seq, k)
        self.last = best
        device = ids.device
        tokens = torch.tensor(best.tokens, dtype=torch.long, device=device)
        if self.shape is None or not best.tokens:
            self.draft = ChainDraft(tokens, None)
        else:
            depths = []
            for parent in best.parents:
                depths.append(1 if parent < 0 else depths[parent] + 1)
            self.draft = CandidateDraft(tokens, None, Tree(best.tokens, best.parents, depths, None), len(seq))
        return self.draft

    def speculate(self, seq: list[int], k: int) -> Proposal:
        """The best-scoring draft over the match lengths and the stores (the module's docstring)."""
        best = Proposal()
        if k <= 0:
            return best
        stores = ([(MEMORY, self.memory.tree)] if self.memory is not None else []) + [(THIS_RUN, self.tree)]
        for store, tree in stores:
            for m, node in tree.matches(seq):
                limit = math.floor(m * self.factor + 1e-6)
                if self.shape is None:
                    draft = chain(tree, node, min(k, limit), self.min_prob)
                else:
                    draft = grow_tree(tree, node, min(self.shape.nodes, limit), self.min_prob, self.shape, k)
                draft.match, draft.store = m, store
                if draft.tokens and draft.score >= best.score:
                    best = draft
        return best

    def annotate(self, record: RoundRecord) -> None:
        """The match, the store and the estimates in the record (its order); the kept tokens into the memory."""
        best = self.last or Proposal()
        order = getattr(self.draft, "order", None) or list(range(len(best.tokens)))
        base = record.extras if record.is_tree else None
        record.extras = SuffixExtras(
            parents=list(base.parents) if base else [],
            path=list(base.path) if base else [],
            match=best.match,
            store=best.store,
            score=best.score,
            prob=[best.prob[i] for i in order],
            count=[best.count[i] for i in order],
        )
        if self.memory is not None:
            if self.run is None:
                self.run = self.memory.begin()
            self.memory.add(self.run, record.draft_tokens[: record.accepted] + [record.token])
