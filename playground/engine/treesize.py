"""Token trees sized by the measured costs (DecodeConfig.tree = "sized:N"), after Sequoia (Chen et al. 2024,
"Sequoia: Scalable, Robust, and Hardware-aware Speculative Decoding"). Pure: no torch.

The acceptance model (Sequoia's positional acceptance): on a node the target has accepted, its i-th most likely
draft child (the i-th draw when sampling) is the one accepted with probability p_i, whatever the node; at most
one child is accepted, so sum p_i <= 1. A tree then keeps, per round, 1 + sum over its nodes of the product of
p_rank along the path to the node (the 1: the target's own token after the path).

The best tree for m nodes (Sequoia's dynamic programme): G[d][m], the most expected kept drafts of a tree of at
most m nodes and depth d under one root, is the best way to hand m nodes to the root's children 1, 2, ... in
rank order, child i taking s nodes (itself and a subtree of s - 1 of depth d - 1):
    H_d(i, m) = max(0, max_{s=1..m} p_i (1 + G[d-1][s-1]) + H_d(i + 1, m - s)),    G[d][m] = H_d(1, m).

The costs, as decoding/tree.py spends them: one draft pass at the root (its new tokens: about one row), then one
draft pass per depth over that depth's nodes, but not over the deepest, then one target pass over 1 + n rows. A
round of widths w_1..w_D (nodes per depth) costs, in target steps,
    (Vd(1) + sum_{d < D} Vd(w_d) + V(1 + n)) / V(1),
V(n) the target's measured pass over n rows (the runner's calibration, speed.verify_profile) and Vd(n) the
draft's (measured the same way when a sized tree first runs). The draft's cost depends on the depths and widths,
so it is not in the programme: each of its trees (every depth d and cap m) is costed as it would run, and the one
with the most expected tokens per target step wins (Sequoia picks its size and depth by the hardware the same
way). A chain of k is the tree of depth k and k nodes: the choice includes it.

The statistics (PositionalAcceptance): each round's visits, a node of the accepted path (or the root) whose
children were tried: how many, and the rank accepted (or none). p_i = hits_i / visits that tried rank i, each
count forgetting DECAY per round toward a prior of PRIOR_VISITS visits at PRIOR. The plan depends only on these
counts (p rounded to STEP, which also lets a drafter reuse plans) and on the costs fixed at the start: a seeded
run is reproducible, as THEORY's k is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from playground.core.records import SizedExtras
from playground.core.treeshape import MAX_TREE_DEPTH, MAX_TREE_WIDTH

PRIOR = (0.7, 0.1, 0.04, 0.02, 0.01, 0.01, 0.005, 0.005)  # by rank: a draft that agrees ~70 % of the time
PRIOR_VISITS = 4.0  # the prior weighs as much as this many visits
DECAY = 0.9  # each round keeps this share of the evidence (and of the prior's weight, refilled)
STEP = 0.01  # p is rounded to this grid before planning
MIN_P = 0.005  # ranks less likely than this are never drafted
EPS = 1e-12


def curve(points: dict[int, float], n: float) -> float:
    """A measured cost at n: linear between the nearest measured neighbours; below the smallest, the smallest's;
    beyond the largest, on along the last two points' slope (never below the last: more rows never cost less)."""
    ns = sorted(points)
    if n in points:
        return points[n]
    if n <= ns[0]:
        return points[ns[0]]
    if n >= ns[-1]:
        if len(ns) == 1:
            return points[ns[-1]]
        a, b = ns[-2], ns[-1]
        return points[b] + max(0.0, points[b] - points[a]) * (n - b) / (b - a)
    b = next(m for m in ns if m > n)
    a = max(m for m in ns if m < n)
    return points[a] + (points[b] - points[a]) * (n - a) / (b - a)


@dataclass(frozen=True)
class TreeCosts:
    """Seconds of one pass over n rows: the target's (V) and the draft's (Vd), each measured at a few n."""

    verify_s: dict[int, float]
    draft_s: dict[int, float]

    def __post_init__(self) -> None:
        for name, points in (("verify_s", self.verify_s), ("draft_s", self.draft_s)):
            if not points or any(n < 1 or not s > 0 for n, s in points.items()):
                raise ValueError(f"tree costs need positive seconds for n >= 1 rows, got {name}={points!r}")

    def steps(self, widths: Sequence[int]) -> float:
        """A round of this many nodes per depth, in target steps (the module's docstring)."""
        return self.table(sum(widths))(widths)

    def table(self, nodes: int):
        """steps() for trees of at most `nodes` nodes, the curves read once (the planner costs many trees)."""
        draft = [0.0] + [curve(self.draft_s, n) for n in range(1, nodes + 1)]
        target = [0.0] + [curve(self.verify_s, n) for n in range(1, nodes + 2)]

        def steps(widths: Sequence[int]) -> float:
            return (draft[1] + sum(draft[w] for w in widths[:-1]) + target[1 + sum(widths)]) / target[1]

        return steps


# When nothing was measured (a drafter built outside the runner): a target pass that grows by 1/16 of a step per
# row beyond the first, and a draft pass of a fifth of a step whatever its rows.
ASSUMED = TreeCosts({1: 1.0, 17: 2.0}, {1: 0.2})


@dataclass(frozen=True)
class Plan:
    """A tree to draft: nodes parent first, each with its parent (-1: the root) and its rank among its siblings
    (1: the draft's likeliest child); what the model expects of it per round; the best chain's figures beside."""

    parents: tuple[int, ...]
    ranks: tuple[int, ...]
    expected: float  # tokens per round, the target's own included
    steps: float  # time per round in target steps
    acceptance: tuple[float, ...] = ()  # the p by rank it was planned with
    chain_k: int = 0  # the best chain under the same model: its k, tokens per round and steps
    chain_expected: float = 0.0
    chain_steps: float = 0.0

    @property
    def nodes(self) -> int:
        return len(self.parents)

    @property
    def depths(self) -> list[int]:
        out: list[int] = []
        for parent in self.parents:
            out.append(1 if parent < 0 else out[parent] + 1)
        return out

    @property
    def depth(self) -> int:
        return max(self.depths, default=0)

    @property
    def widths(self) -> list[int]:
        """Nodes per depth (depth 1 first)."""
        depths = self.depths
        return [depths.count(d) for d in range(1, self.depth + 1)]

    @property
    def rate(self) -> float:
        """Expected tokens per target step."""
        return self.expected / self.steps

    def children(self, node: int) -> list[int]:
        """The plan's children of a node (-1: the root), in rank order."""
        return [i for i, parent in enumerate(self.parents) if parent == node]


def best_values(p: Sequence[float], nodes: int, depth: int) -> tuple[list[list[float]], list[list[list[int]]]]:
    """The programme: G[d][m] for d <= depth, m <= nodes, and the choices S[d][i][m] (nodes handed to the child of
    rank i + 1 when m are left for it and the ranks after it; 0: none) that rebuild its trees."""
    width = len(p)
    G = [[0.0] * (nodes + 1)]
    S: list[list[list[int]]] = [[]]
    for d in range(1, depth + 1):
        below = G[d - 1]
        after = [0.0] * (nodes + 1)  # H_d(i + 1, .), starting past the last rank
        choices: list[list[int]] = [[]] * width
        for i in range(width - 1, -1, -1):
            here, chosen = [0.0] * (nodes + 1), [0] * (nodes + 1)
            for m in range(1, nodes + 1):
                best, arg = 0.0, 0
                for s in range(1, m + 1):
                    value = p[i] * (1.0 + below[s - 1]) + after[m - s]
                    if value > best + EPS:
                        best, arg = value, s
                here[m], chosen[m] = best, arg
            after, choices[i] = here, chosen
        G.append(after)
        S.append(choices)
    return G, S


def build(S: list[list[list[int]]], nodes: int, depth: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The tree the choices S give for at most `nodes` nodes and `depth` depths: (parents, ranks), breadth first."""
    parents: list[int] = []
    ranks: list[int] = []
    queue = [(-1, depth, nodes)]  # (a node, the depths left under it, the nodes its subtree may hold)
    while queue:
        node, d, m = queue.pop(0)
        if d == 0:
            continue
        for i, choice in enumerate(S[d]):
            s = choice[m]
            if s == 0:
                break
            parents.append(node)
            ranks.append(i + 1)
            queue.append((len(parents) - 1, d - 1, s - 1))
            m -= s
    return tuple(parents), tuple(ranks)


def expected_tokens(parents: Sequence[int], ranks: Sequence[int], p: Sequence[float]) -> float:
    """Tokens per round of a tree under positional acceptance p: 1 + sum over nodes of their path's product."""
    reach: list[float] = []
    for parent, rank in zip(parents, ranks):
        reach.append((1.0 if parent < 0 else reach[parent]) * (p[rank - 1] if rank <= len(p) else 0.0))
    return 1.0 + sum(reach)


def plan(p: Sequence[float], costs: TreeCosts, nodes: int, depth: int = MAX_TREE_DEPTH) -> Plan:
    """The tree of at most `nodes` nodes and `depth` depths with the most expected tokens per target step."""
    p = [x for x in p[:MAX_TREE_WIDTH] if x >= MIN_P] or [MIN_P]
    depth = max(1, min(depth, nodes))
    G, S = best_values(p, nodes, depth)
    steps = costs.table(nodes)
    best: Plan | None = None
    seen: set[tuple[int, ...]] = set()
    for d in range(1, depth + 1):
        for m in range(1, nodes + 1):
            if G[d][m] <= G[d][m - 1] + EPS or G[d][m] <= G[d - 1][m] + EPS:
                continue  # the same value with fewer nodes or depths: a tree already costed
            parents, ranks = build(S, m, d)
            if parents in seen:
                continue
            seen.add(parents)
            candidate = Plan(parents, ranks, 1.0 + G[d][m], 0.0)
            candidate = Plan(parents, ranks, candidate.expected, steps(candidate.widths))
            if best is None or candidate.rate > best.rate + EPS:
                best = candidate
    chain_k = max(range(1, depth + 1), key=lambda k: (_chain(p, k) / steps([1] * k), -k))
    return Plan(
        best.parents,
        best.ranks,
        best.expected,
        best.steps,
        tuple(p),
        chain_k,
        _chain(p, chain_k),
        steps([1] * chain_k),
    )


def _chain(p: Sequence[float], k: int) -> float:
    """Tokens per round of a chain of k: 1 + p_1 + p_1^2 + ... + p_1^k."""
    return sum(p[0] ** j for j in range(k + 1))


class PositionalAcceptance:
    """p_i, the chance that a node's i-th ranked draft child is the one the target accepts, from this run's
    rounds (the module's docstring): counts that forget DECAY per round toward a prior."""

    def __init__(self, prior: Sequence[float] = PRIOR, weight: float = PRIOR_VISITS, decay: float = DECAY):
        self.prior, self.weight, self.decay = tuple(prior), weight, decay
        self.hits = [weight * q for q in self.prior]
        self.tried = [weight] * len(self.prior)

    def update(self, visits: Sequence[tuple[int, int]]) -> None:
        """One round: per visit (children tried, the rank accepted or 0 when none was)."""
        for i, q in enumerate(self.prior):
            self.hits[i] = self.decay * self.hits[i] + (1 - self.decay) * self.weight * q
            self.tried[i] = self.decay * self.tried[i] + (1 - self.decay) * self.weight
        for tried, rank in visits:
            for i in range(min(tried, len(self.prior))):
                self.tried[i] += 1.0
            if 1 <= rank <= len(self.prior):
                self.hits[rank - 1] += 1.0

    @property
    def p(self) -> tuple[float, ...]:
        """The estimate by rank, on the STEP grid, never rising with the rank, summing to below 1."""
        out: list[float] = []
        for hits, tried in zip(self.hits, self.tried):
            out.append(min(hits / tried, out[-1] if out else 1.0))
        total = sum(out)
        scale = min(1.0, 0.99 / total) if total > 0 else 1.0
        return tuple(round(round(x * scale / STEP) * STEP, 6) for x in out)


class Sizer:
    """A sized tree's planner for one run: the acceptance so far, the costs, the cap; plans cached by p."""

    def __init__(self, nodes: int, costs: TreeCosts | None = None):
        self.nodes, self.costs = nodes, costs or ASSUMED
        self.acceptance = PositionalAcceptance()
        self._plans: dict[tuple[tuple[float, ...], int], Plan] = {}

    def plan(self, depth: int = MAX_TREE_DEPTH) -> Plan:
        key = (self.acceptance.p, depth)
        if key not in self._plans:
            self._plans[key] = plan(key[0], self.costs, self.nodes, depth)
        return self._plans[key]

    def observe(self, visits: Sequence[tuple[int, int]]) -> None:
        self.acceptance.update(visits)

    def reset(self) -> None:
        """A new run: the prior again (the plans stay: the same p and costs give the same tree)."""
        self.acceptance = PositionalAcceptance()


def visits(children: Sequence[Sequence[int]], parents: Sequence[int], path: Sequence[int]) -> list[tuple[int, int]]:
    """A drafted tree's round as the acceptance counts it: per node of the accepted path, its parent's children
    tried and its rank among them; then the path's last node (or the root), if it had children: none accepted.
    children: per row (0: the root, 1 + i: node i) the node's children in rank (draw) order."""
    out = [(len(children[parents[i] + 1]), list(children[parents[i] + 1]).index(i) + 1) for i in path]
    last = children[path[-1] + 1 if path else 0]
    return out + ([(len(last), 0)] if last else [])


def sized_extras(parents: list[int], path: list[int], plan: Plan) -> SizedExtras:
    """A sized round's extras (records.SizedExtras): its tree as recorded and the plan's figures."""
    return SizedExtras(
        list(parents),
        list(path),
        plan.expected,
        plan.steps,
        plan.widths,
        list(plan.acceptance),
        plan.chain_k,
        plan.chain_expected,
        plan.chain_steps,
    )


# ---------------------------------------------------------------- confidence-shaped trees ("confidence:N")

FLOOR = 0.04  # a node whose path probability is under this is never drafted, whatever the costs say
LEARN = 0.3  # each round's measured pass moves the run's cost scale this far


class RunCosts:
    """The target's V(n) and the draft's Vd(n) as this run finds them: the warm-up's curves (or ASSUMED) scaled by
    what the run's own rounds measured (a warm-up taken under another load misleads a whole run otherwise)."""

    def __init__(self, costs: TreeCosts | None = None):
        self.costs = costs or ASSUMED
        self.scale = {"verify": 1.0, "draft": 1.0}
        self.rounds = 0

    def verify(self, rows: int) -> float:
        return self.scale["verify"] * curve(self.costs.verify_s, rows)

    def draft(self, rows: int) -> float:
        return self.scale["draft"] * curve(self.costs.draft_s, rows)

    def observe(self, rows: int, verify_s: float, passes: Sequence[int], draft_s: float) -> None:
        """A round's record: its target pass over `rows` rows took verify_s, its draft passes (rows each) draft_s."""
        measured = {
            "verify": (verify_s, curve(self.costs.verify_s, rows)),
            "draft": (draft_s, sum(curve(self.costs.draft_s, w) for w in passes)),
        }
        for name, (seconds, model) in measured.items():
            if seconds > 0 and model > 0:
                ratio, old = seconds / model, self.scale[name]
                self.scale[name] = ratio if not self.rounds else (1 - LEARN) * old + LEARN * ratio
        self.rounds += 1


@dataclass
class Growth:
    """One round's confidence-shaped tree as it grows, depth by depth: a node joins while its path probability
    (the product of the draft's p along its path: its chance of being kept, as the draft sees it) pays for its row,
    i.e. while it raises the expected tokens per second, (gain + s) / (time + dt) >= gain / time."""

    costs: RunCosts
    budget: int
    nodes: int = 0
    gain: float = 1.0  # expected tokens kept: the target's own, plus each node's path probability
    passes: list[int] | None = None  # rows of each draft pass so far (the root's first)

    def __post_init__(self) -> None:
        self.passes = self.passes or [1]

    def time(self) -> float:
        return sum(self.costs.draft(w) for w in self.passes) + self.costs.verify(1 + self.nodes)

    def _pays(self, s: float, extra: float) -> bool:
        row = self.costs.verify(2 + self.nodes) - self.costs.verify(1 + self.nodes)
        return self.nodes < self.budget and s >= FLOOR and s * self.time() >= self.gain * (row + extra)

    def take(self, scores: Sequence[float]) -> int:
        """How many of a depth's candidates (their path probabilities, best first) join the tree."""
        taken = 0
        for s in sorted(scores, reverse=True):
            if not self._pays(s, 0.0):
                break
            self.gain, self.nodes, taken = self.gain + s, self.nodes + 1, taken + 1
        return taken

    def expand(self, best: float, width: int) -> bool:
        """Whether a draft pass over the newest depth (width nodes, the best at path probability `best`) can pay:
        its best child would be kept at most with probability `best`. Counts the pass when it does."""
        if not self._pays(best, self.costs.draft(width)):
            return False
        self.passes.append(width)
        return True
