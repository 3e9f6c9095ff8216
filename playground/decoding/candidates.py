"""Candidate trees: deterministic continuations read from a data store (suffix decoding's suffix tree, lookahead
decoding's n-gram pool), merged into one token tree and verified in one target pass.

q: target prob, p: draft prob. A candidate is not drawn from a draft distribution: p is one-hot on each one,
as for prompt lookup. The tree's nodes are the distinct prefixes of the candidates (a trie), a parent before its
children; the target scores them all in one pass with a tree mask (tree.score_tree, or the strategy's own pass).
- greedy: the longest root-to-node path whose every token is the target's argmax, then the target's argmax
  after it (acceptance.tree_greedy): exactly the target alone;
- sampling: at a node whose children are the distinct tokens x_1..x_m, in a fixed order, r = q; x_i is kept
  with probability r(x_i), else r <- r with x_i removed, renormalised; when all are refused the token is drawn
  from the last r. So P(x_i) = q(x_i) for each candidate and P(y) = q(y) for every other token: the kept token
  follows q whatever the candidates were (SpecInfer's multi-step speculative sampling with one-hot drafts, Miao
  et al. 2024; the rule of lookahead decoding's reference implementation, Fu et al. 2024). The walk then
  recurses into the kept child. The candidates must not depend on this round's draws: they are read before
  the pass.
Afterwards the target's cache keeps the accepted path (tree.keep_path: gathered into place, no recompute).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel

from playground.engine.acceptance import accept_tree
from playground.decoding.tree import keep_path, score_tree
from playground.core.draft import Draft, Tree
from playground.core.records import RoundRecord, TreeExtras
from playground.engine.sampling import logits_to_probs, wide
from playground.core.config import DecodeConfig


def merge(paths: list[list[int]]) -> tuple[Tree, list[int]]:
    """The trie of some token paths (each continues the sequence's last token): a Tree (p: none, one-hot) and,
    per node, the index of the first path that made it."""
    tokens: list[int] = []
    parents: list[int] = []
    depths: list[int] = []
    owner: list[int] = []
    where: dict[tuple[int, int], int] = {}  # (parent node, token) -> node
    for index, path in enumerate(paths):
        parent = -1
        for depth, token in enumerate(path, 1):
            node = where.get((parent, token))
            if node is None:
                node = where[(parent, token)] = len(tokens)
                tokens.append(token)
                parents.append(parent)
                depths.append(depth)
                owner.append(index)
            parent = node
    return Tree(tokens, parents, depths, None), owner


def record(
    tree: Tree, path: list[int], token: int, logits: torch.Tensor, q_rows: torch.Tensor, greedy: bool
) -> tuple[RoundRecord, list[int]]:
    """The round as plain data, nodes in the order TreeExtras describes (the path, the candidates tried where it
    stopped, the rest), p = 1 for every node (one-hot); greedy: the margins of the kept tokens. Returns the record
    and the order (record position -> tree node), for the strategy's own per-node data."""
    last = path[-1] + 1 if path else 0  # the row that decided the token
    tried = tree.children[last]
    order = path + tried + [i for i in range(len(tree)) if i not in set(path) | set(tried)]
    where = {node: i for i, node in enumerate(order)}
    device = q_rows.device
    rows = torch.tensor([tree.parents[i] + 1 for i in order], dtype=torch.long, device=device)
    ids = torch.tensor([tree.tokens[i] for i in order], dtype=torch.long, device=device)
    kept_rows = torch.tensor([0] + [node + 1 for node in path], dtype=torch.long, device=device)
    top2 = torch.topk(wide(logits[kept_rows]), 2, dim=-1).values if greedy else None
    margins = (top2[:, 0] - top2[:, 1]) if top2 is not None else q_rows.new_empty(0)
    floats = torch.cat([q_rows[rows, ids], q_rows[last, token].view(1), margins]).tolist()
    T = len(order)
    kind = "target" if T == 0 else "correction" if tried else "bonus"
    result = RoundRecord(
        round=0,
        k=T,
        draft_tokens=ids.tolist(),
        accepted=len(path),
        token=token,
        token_kind=kind,
        new_tokens=[],
        draft_s=0.0,
        verify_s=0.0,
        total_new=0,
        p=[1.0] * T,
        q=floats[:T],
        token_q=floats[T],
        margins=floats[T + 1 :],
        extras=TreeExtras(
            [where[tree.parents[i]] if tree.parents[i] >= 0 else -1 for i in order], list(range(len(path)))
        ),
    )
    return result, order


@dataclass
class CandidateDraft(Draft):
    """A candidate tree (Draft.tokens: its nodes' tokens; Draft.logits None: one-hot), verified as a tree. After
    verify(): `path` (the kept nodes) and `order` (record position -> node). A strategy whose pass scores more
    than the sequence and the tree (lookahead's window) overrides score() and sets `offset`, the cache positions
    its extra tokens take before the nodes."""

    tree: Tree | None = None
    length: int = 0  # the sequence's length when it was drafted
    offset: int = 0
    path: list[int] = field(default_factory=list)
    order: list[int] = field(default_factory=list)

    def score(self, target: PreTrainedModel, cache: DynamicCache, ids: torch.Tensor, cached: int) -> torch.Tensor:
        """The target's logits (1 + T, V) at the root (row 0) and at node i (row 1 + i), from one pass."""
        return score_tree(target, cache, ids, cached, self.tree)

    def verify(
        self,
        target: PreTrainedModel,
        cache: DynamicCache,
        ids: torch.Tensor,
        cached: int,
        config: DecodeConfig,
        generator: torch.Generator | None,
    ) -> RoundRecord:
        params = config.sampling
        logits = self.score(target, cache, ids, cached)
        q_rows = logits_to_probs(logits, params)
        self.path, token = accept_tree(self.tree, logits, q_rows, params.greedy, generator)
        keep_path(cache, self.length, [self.length + self.offset + i for i in self.path])
        result, self.order = record(self.tree, self.path, token, logits, q_rows, params.greedy)
        return result
