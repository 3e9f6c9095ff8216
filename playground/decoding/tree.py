"""Token trees: the draft proposes a tree of continuations, the target scores every node in one pass.

q: target prob, p: draft prob. The root of a tree is the sequence's last token; every node is a draft
token whose parent is the token before it. Drafting goes depth by depth, one draft forward per depth
over the new nodes (tree attention on top of the draft's KV cache):
- static shape (3, 2, 1, 1): every node at depth d gets branching[d] children;
- dynamic (a node budget N): at each depth, the children "slots" of the frontier nodes compete on the
  score cum(v) * j-th largest p(. | v), cum(v) being v's cumulative draft probability along its path;
  the best min(remaining budget, layer_width(N)) slots are taken (EAGLE-2's expansion by cumulative
  probability, depth by depth, without its final re-ranking);
- sized (a node cap N, playground/engine/treesize.py): a tree planned before the round from the run's acceptance by
  rank and the measured costs (Sequoia); every planned node gets its planned children, the j-th planned child
  being the j-th most likely (or j-th drawn) token.
Children are the top-c tokens of p when greedy, and c draws WITHOUT replacement from p (Gumbel top-c)
when sampling. How many children a node gets is fixed before they are drawn (from the node's own
distribution and from nodes no deeper than it), which is what the sampling rule below needs.

Verification is one target forward over the cached-out part of the sequence plus all nodes, with a 4D
attention mask (each node sees the cached prefix, its ancestors and itself) and per-node position ids
(depth after the root). Then:
- greedy: the longest root-to-node path whose every token is the target's argmax, plus the target's
  argmax after it: exactly target-only greedy decoding;
- sampling: recursive rejection sampling (Jeon et al. 2024, "Recursive Speculative Decoding", the
  without-replacement form of SpecInfer's multi-step speculative sampling, Miao et al. 2024 / SpecTr,
  Sun et al. 2023). At a node, with r = q and the children x_1..x_m drawn without replacement from p:
  accept x_i with probability min(1, r(x_i) / p_i(x_i)), where p_i is p with x_1..x_{i-1} removed and
  renormalised (x_i's real law); after a rejection r <- norm(max(r - p_i, 0)); when all are rejected
  draw from the final r. The kept token then follows q exactly, and the rule recurses into the kept
  child's subtree. (SpecInfer's form keeps p fixed, which is right for i.i.d. draws WITH replacement.)
Afterwards both KV caches keep exactly the accepted path: its nodes' key/value entries are gathered
into contiguous positions in every layer and the rest is cropped (no recompute, on either side).

The strategy: a TreeDrafter wraps a model drafter (draft model or early exit) and owns its KV cache; its
proposal, a TreeDraft, verifies itself (the mask, the rule and the target cache's gather are the tree's), so
the engine runs a tree round as it runs a chain round.

Supported models: decoders whose attention layers are all full attention and that take a custom 4D
float mask with position ids through the sdpa, eager or invariant (playground/kernels) attention (Llama,
Qwen2 / Qwen2.5 / Qwen3, SmolLM, Mistral without a sliding window). Refused: sliding-window or hybrid layers (Gemma 2/3),
linear attention / Mamba, flash-attention kernels (no custom masks). Tested on the tiny Llamas of
playground/models/tiny.py and a tiny random Qwen2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel

from playground.decoding.model import ModelDrafter
from playground.core.errors import PlaygroundError
from playground.core.records import RoundRecord, TreeExtras
from playground.engine.acceptance import accept_tree
from playground.engine.sampling import logits_to_probs
from playground.kernels.step import LeanForward, TargetCache
from playground.core.treeshape import MAX_TREE_WIDTH, TreeShape
from playground.engine.treesize import Growth, Plan, RunCosts, Sizer, TreeCosts, sized_extras, visits
from playground.core.config import DecodeConfig, SamplingParams
from playground.core.draft import Draft, Drafter, Tree


def check_tree_model(model: PreTrainedModel, role: str = "target") -> None:
    """Refuse, with a clear message, a model the tree path cannot run (see the module's docstring)."""
    config = model.config
    kinds = set(getattr(config, "layer_types", None) or ())
    sliding = (kinds - {"full_attention"}) or (
        not kinds and getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    )
    attention = getattr(config, "_attn_implementation", "sdpa")
    if sliding or attention not in ("sdpa", "eager", "invariant"):
        why = (
            f"{attention} attention"
            if attention not in ("sdpa", "eager", "invariant")
            else "layers that are not full attention"
        )
        raise PlaygroundError(
            f"Token trees need a decoder with full attention everywhere and a custom attention "
            f"mask (Llama, Qwen2, Qwen3, Mistral without sliding window); the {role} "
            f"({type(model).__name__}) has {why}. Draft a chain instead."
        )


def _sees(queries: int, ancestry: torch.Tensor) -> torch.Tensor:
    """(queries + R, queries + C) bool: which of a pass's fed rows (`queries` sequence tokens, causal, ending at the
    root, then R tree nodes) and earlier tree nodes each row sees; ancestry[r, c]: whether node row r sees node c."""
    rows, cols = queries + ancestry.shape[0], queries + ancestry.shape[1]
    allowed = torch.zeros(rows, cols, dtype=torch.bool)
    allowed[:queries, :queries] = torch.ones(queries, queries, dtype=torch.bool).tril()
    allowed[queries:, :queries] = True
    allowed[queries:, queries:] = ancestry
    return allowed


def _tree_mask(prefix: int, queries: int, ancestry: torch.Tensor, dtype: torch.dtype, device) -> torch.Tensor:
    """(1, 1, queries + R, prefix + queries + C) additive mask for HF's path: `prefix` cached positions every row
    sees, then _sees(queries, ancestry)."""
    sees = _sees(queries, ancestry)
    allowed = torch.cat([torch.ones(sees.shape[0], prefix, dtype=torch.bool), sees], dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return mask.to(device)[None, None]


def _children(
    rows: torch.Tensor, counts: list[int], greedy: bool, generator: torch.Generator | None
) -> list[list[int]]:
    """Per row of p (n, V), counts[i] children: its top tokens (greedy) or draws without replacement
    in draw order (Gumbel top-c: the order of log p + Gumbel noise is sequential sampling's order)."""
    top = max(counts)
    if top == 0:
        return [[] for _ in counts]
    keys = rows
    if not greedy:
        u = torch.rand(rows.shape, generator=generator, device=rows.device).clamp_(1e-20, 1.0)
        keys = rows.log() - (-u.log()).log()  # -inf where p = 0: never drawn
    picked = torch.topk(keys, top, dim=-1).indices.tolist()
    return [row[:c] for row, c in zip(picked, counts)]


def layer_width(budget: int) -> int:
    """Nodes a dynamic tree adds per depth: a quarter of its budget (at least 1, at most MAX_TREE_WIDTH),
    so that a budget is spent over about four depths or more rather than on the root's children alone."""
    return max(1, min(MAX_TREE_WIDTH, -(-budget // 4)))


def _counts(
    shape: TreeShape, depth: int, rows: torch.Tensor, cum: list[float], budget: int, growth: Growth | None = None
) -> list[int]:
    """Children per frontier node at this depth, decided before any of them is drawn: the static
    branching, or the dynamic slots by value-free score cum(v) * (j-th largest p(. | v)); never more
    than the node's support (a draw without replacement cannot exceed it)."""
    width = min(MAX_TREE_WIDTH, rows.shape[-1])
    values = torch.topk(rows, width, dim=-1).values  # sorted, descending
    support = (values > 0).sum(-1).tolist()
    if not shape.dynamic:
        return [min(shape.branching[depth - 1], s) for s in support]
    scores = values * torch.tensor(cum, dtype=values.dtype, device=values.device)[:, None]
    take = min(budget, layer_width(shape.budget), int(sum(support)))
    if growth is not None:  # confidence-shaped: the slots that pay for their rows, best first
        take = growth.take([v for v in scores.flatten().tolist() if v > 0])
    chosen = torch.topk(scores.flatten(), take).indices.div(width, rounding_mode="floor").tolist()
    return [min(chosen.count(i), s) for i, s in enumerate(support)]


@torch.inference_mode()
def draft_tree(
    drafter,
    ids: torch.Tensor,
    shape: TreeShape,
    max_depth: int,
    params: SamplingParams,
    generator: torch.Generator | None,
    plan: Plan | None = None,
    growth: Growth | None = None,
) -> Tree:
    """A tree of at most max_depth levels from a ModelDrafter (its model and KV cache) after ids (1, L); a sized
    shape's from its plan. Leaves the draft's cache holding the sequence and the first `Tree.fed` nodes."""
    length = ids.shape[1]
    rows = logits_to_probs(_draft_pass(drafter, ids[:, drafter.cached :]), params)  # p at the root's children
    tokens: list[int] = []
    parents: list[int] = []
    depths: list[int] = []
    p_rows, cum, frontier, fed = [rows], [1.0], [-1], 0
    budget = shape.nodes
    slots = [-1]  # a sized tree: the plan's node of each frontier node (-1: the plan's root)
    for depth in range(1, max_depth + 1):
        if plan is None:
            counts = _counts(shape, depth, rows, cum, budget - len(tokens), growth)
        else:
            width = min(MAX_TREE_WIDTH, rows.shape[-1])
            support = (torch.topk(rows, width, dim=-1).values > 0).sum(-1).tolist()
            counts = [min(len(plan.children(v)), s) for v, s in zip(slots, support)]
        picked = _children(rows, counts, params.greedy, generator)
        first = len(tokens)
        for v, kids in zip(frontier, picked):
            tokens += kids
            parents += [v] * len(kids)
            depths += [depth] * len(kids)
        if len(tokens) == first:
            break
        if shape.dynamic:  # the new nodes' cumulative p: their parent's times their own
            own = torch.cat([row[kids] for row, kids in zip(rows, picked) if kids]).tolist()
            cum = [c * p for c, p in zip([c for c, kids in zip(cum, picked) for _ in kids], own)]
        frontier = list(range(first, len(tokens)))
        if plan is not None:  # the j-th child drafted is the plan's j-th
            slots = [plan.children(v)[j] for v, kids in zip(slots, picked) for j in range(len(kids))]
            if not any(plan.children(v) for v in slots):
                break  # no planned children under this depth: no draft pass over it
        if depth == max_depth or len(tokens) >= budget:
            break
        if growth is not None and not growth.expand(max(cum), len(tokens) - first):
            break  # no child of this depth could pay for the draft pass and its row
        # the new nodes through the draft, on top of the sequence and the nodes fed so far: their children's p
        new = torch.tensor([tokens[first:]], device=ids.device)
        rows = logits_to_probs(_draft_pass(drafter, new, length - 1 + depth, _ancestry(parents)[first:]), params)
        p_rows.append(rows)
        fed = len(tokens)
    unfed = 1 + len(tokens) - sum(r.shape[0] for r in p_rows)
    drafter.cached = length + fed
    return Tree(tokens, parents, depths, torch.cat(p_rows + [rows.new_zeros(unfed, rows.shape[-1])]), fed)


def _draft_pass(drafter, feed: torch.Tensor, position: int = 0, ancestry: torch.Tensor | None = None) -> torch.Tensor:
    """The draft's logits after feed (1, S) on top of its cache: the last row's (1, V) for the sequence (ancestry
    None), else every row's (S, V) for one depth of nodes at `position`, each seeing the sequence and its ancestry
    among the nodes fed so far. On the drafter's lean forward when it runs on one (one C call), else HF's path."""
    lean = getattr(drafter, "lean_forward", None)
    S = feed.shape[1]
    if lean is not None and ancestry is None:
        return lean(feed, keep=1)
    if lean is not None:
        return lean.tree(feed, torch.full((S,), position), _sees(0, ancestry), keep=S)
    model, cache = drafter.model, drafter.cache
    if ancestry is None:
        return model(input_ids=feed, cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1:]
    mask = _tree_mask(cache.get_seq_length() - ancestry.shape[1] + S, 0, ancestry, model.dtype, feed.device)
    positions = torch.full_like(feed, position)
    return model(input_ids=feed, position_ids=positions, attention_mask=mask, cache=cache, use_cache=True).logits[0]


def _ancestry(parents: list[int]) -> torch.Tensor:
    """(T, T) bool: [i, j] when node j is node i or one of its ancestors (parents before children)."""
    mask = torch.eye(len(parents), dtype=torch.bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            mask[i] |= mask[parent]
    return mask


def score_tree(target: PreTrainedModel, cache: TargetCache, ids: torch.Tensor, cached: int, tree: Tree) -> torch.Tensor:
    """One target pass over ids[:, cached:] and every node: logits (1 + T, V) for the root (row 0) and node i (1 + i)."""
    length = ids.shape[1]
    depths = torch.tensor(tree.depths, device=ids.device)
    feed = torch.cat([ids[:, cached:], torch.tensor([tree.tokens], device=ids.device)], dim=1)
    positions = torch.cat([torch.arange(cached, length, device=ids.device), length - 1 + depths])[None]
    if isinstance(cache, LeanForward):  # one C call, as a chain's verification
        return cache.tree(feed, positions, _sees(length - cached, _ancestry(tree.parents)), keep=len(tree) + 1)
    mask = _tree_mask(cached, length - cached, _ancestry(tree.parents), target.dtype, ids.device)
    out = target(
        input_ids=feed,
        position_ids=positions,
        attention_mask=mask,
        cache=cache,
        use_cache=True,
        logits_to_keep=len(tree) + 1,
    )
    return out.logits[0]


def keep_path(cache: TargetCache, start: int, positions: list[int]) -> None:
    """Move the key/value entries at cache positions `positions` (in order) to start, start + 1, ... in
    every layer, then crop the cache to start + len(positions): the accepted path, contiguous."""
    if isinstance(cache, LeanForward):
        cache.keep(start, positions)
        return
    n = len(positions)
    if n and positions != list(range(start, start + n)):
        for layer in cache.layers:
            if layer.keys is None or layer.keys.dim() < 3:  # a layer that holds no position yet: nothing to move
                continue  # (seen once in an early-exit sized tree's run, not reproduced; the target verifies anyway)
            index = torch.tensor(positions, device=layer.keys.device)
            layer.keys[:, :, start : start + n] = layer.keys.index_select(2, index)
            layer.values[:, :, start : start + n] = layer.values.index_select(2, index)
    extra = cache.get_seq_length() - (start + n)
    if extra > 0:
        cache.crop(-extra)


def tree_record(tree: Tree, path: list[int], token: int, q_rows: torch.Tensor) -> RoundRecord:
    """The round as plain data, nodes reordered as TreeExtras describes (path, tried siblings, rest)."""
    last = path[-1] + 1 if path else 0  # the row that decided the token
    tried = tree.children[last]
    order = path + tried + [i for i in range(len(tree)) if i not in set(path) | set(tried)]
    where = {node: i for i, node in enumerate(order)}
    rows = torch.tensor([tree.parents[i] + 1 for i in order], dtype=torch.long, device=q_rows.device)  # long if empty
    tokens = torch.tensor([tree.tokens[i] for i in order], dtype=torch.long, device=q_rows.device)
    floats = torch.cat([tree.p_rows[rows, tokens], q_rows[rows, tokens], q_rows[last, token].view(1)]).tolist()
    T = len(order)
    return RoundRecord(
        round=0,
        k=T,
        draft_tokens=tokens.tolist(),
        accepted=len(path),
        token=token,
        token_kind="correction" if tried else "bonus",
        new_tokens=[],
        draft_s=0.0,
        verify_s=0.0,
        total_new=0,
        p=floats[:T],
        q=floats[T : 2 * T],
        token_q=floats[2 * T],
        extras=TreeExtras(
            [where[tree.parents[i]] if tree.parents[i] >= 0 else -1 for i in order], list(range(len(path)))
        ),
    )


# ---------------------------------------------------------------- the strategy


@dataclass
class TreeDraft(Draft):
    """A drafted tree (Draft.tokens: its nodes' tokens), verified as a tree; after verify(), `path` holds the
    accepted path's nodes."""

    lean = True  # verified on the lean forward's cache where the target runs on one (LeanForward.tree)
    tree: Tree | None = None
    length: int = 0  # the sequence's length when it was drafted
    path: list[int] = field(default_factory=list)

    def verify(
        self,
        target: PreTrainedModel,
        cache: TargetCache,
        ids: torch.Tensor,
        cached: int,
        config: DecodeConfig,
        generator: torch.Generator | None,
    ) -> RoundRecord:
        """Score every node in one target pass, keep the accepted path (greedy or recursive rejection
        sampling), gather it into place in the target's cache."""
        params = config.sampling
        logits = score_tree(target, cache, ids, cached, self.tree)
        q_rows = logits_to_probs(logits, params)
        self.path, token = accept_tree(self.tree, logits, q_rows, params.greedy, generator)
        keep_path(cache, self.length, [self.length + i for i in self.path])
        return tree_record(self.tree, self.path, token, q_rows)


class TreeDrafter(Drafter):
    """A token tree of DecodeConfig.tree's shape from a model drafter (its model and its KV cache, which this
    strategy keeps to the accepted path); a round whose budget leaves no room for a tree is the drafter's
    own (empty) chain. A sized shape plans each round's tree (treesize.Sizer) from `costs` (the runner's
    measurements; assumed ones without) and the acceptance by rank of the rounds so far."""

    def __init__(self, drafter: Drafter, shape: TreeShape, target: PreTrainedModel, costs: TreeCosts | None = None):
        if not isinstance(drafter, ModelDrafter):
            raise PlaygroundError(f"A token tree needs a model drafter; '{drafter.name}' drafts a chain only.")
        check_tree_model(target)
        check_tree_model(drafter.model, "draft")
        self.drafter, self.shape, self.name = drafter, shape, drafter.name
        self.sizer = Sizer(shape.nodes, costs) if shape.sized else None
        self.costs = RunCosts(costs) if shape.confidence else None  # the warm-up's, then the run's own rounds'
        self.growth: Growth | None = None  # this round's (a confidence-shaped tree)
        self.plan: Plan | None = None  # this round's (a sized shape)
        self.last: TreeDraft | None = None

    @property
    def cache(self):
        """The draft's KV cache (its model drafter's)."""
        return self.drafter.cache

    def reset(self) -> None:
        self.drafter.reset()
        self.last = None
        if self.sizer is not None:
            self.sizer.reset()
        if self.costs is not None:  # each run learns its own costs (the load may have changed)
            self.costs = RunCosts(self.costs.costs)

    def depth(self, k: int) -> int:
        """The tree's shape sets the depth, whatever the k policy says (a sized tree's plan, within it)."""
        return self.shape.depth

    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        if k == 0:
            self.last = None
            return self.drafter.propose(ids, 0, params, generator)
        self.plan = self.sizer.plan() if self.sizer is not None else None  # on the round's clock, as drafting is
        self.growth = Growth(self.costs, self.shape.nodes) if self.costs is not None else None
        tree = draft_tree(
            self.drafter, self.drafter.context(ids), self.shape, k, params, generator, self.plan, self.growth
        )
        self.last = TreeDraft(torch.tensor(tree.tokens, dtype=torch.long, device=ids.device), None, tree, ids.shape[1])
        return self.last

    def nbytes(self) -> int:
        return self.drafter.nbytes()  # the drafted tree itself is a few nodes

    def observe(self, num_accepted: int) -> None:
        if self.last is None:
            self.drafter.observe(num_accepted)
            return
        if self.sizer is not None:  # the acceptance by rank learns from the round
            self.sizer.observe(visits(self.last.tree.children, self.last.tree.parents, self.last.path))
        # The draft's cache keeps exactly the accepted path's nodes it has run: gathered into place, the rest cropped.
        length = self.last.length - self.drafter.skipped  # the draft's context's length when it drafted
        fed = [length + i for i in self.last.path if i < self.last.tree.fed]
        keep_path(getattr(self.drafter, "lean_forward", None) or self.drafter.cache, length, fed)
        self.drafter.cached = length + len(fed)

    def annotate(self, record: RoundRecord) -> None:
        """A sized tree's round says what was planned and why (records.SizedExtras); a confidence-shaped tree's
        costs learn from the round's measured passes."""
        if self.growth is not None and self.last is not None and record.is_tree:
            self.costs.observe(1 + record.prefill + record.k, record.verify_s, self.growth.passes, record.draft_s)
        if self.sizer is not None and self.last is not None and self.plan is not None and record.is_tree:
            record.extras = sized_extras(record.tree.parents, record.tree.path, self.plan)
        self.plan = None
