"""The shape of a token tree (DecodeConfig.tree): typed and validated here, parsed from text by
parse_tree (part of the run description: config.DecodeConfig holds one). Pure: no torch.

Four kinds: static ("3-2-1-1"), dynamic ("dynamic:16", EAGLE-2 style), sized ("sized:16", Sequoia style: a
new tree every round, the one with the most expected tokens per unit of time under the measured costs and the
run's acceptance by rank, at most N nodes; playground/engine/treesize.py) and confidence-shaped ("confidence:16":
grown by the draft's path probabilities while a node pays for its rows under the run's costs, at most N nodes; a
chain where the draft is sure; decoding/tree.py)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from playground.core.errors import PlaygroundError, shown
from playground.core.numbers import is_int

MAX_TREE_NODES = 64  # the most draft tokens a token tree may hold (the target scores them in one pass)
MAX_TREE_WIDTH = 8  # the most children a tree node may have
MAX_TREE_DEPTH = 16  # the longest path (spec.K_MAX)
SIZED_NODES = 16  # "sized" alone: at most this many nodes (the runner's V(n) profile is measured up to 17 rows)


@dataclass(frozen=True)
class TreeShape:
    """A token tree to draft instead of a chain (playground/decoding/tree.py); built by parse_tree. Static
    ("3-2-1-1"): branching[d] children for every node at depth d (the root: the sequence's last token);
    dynamic ("dynamic:16"): a node budget spent on the nodes of highest cumulative draft p (EAGLE-2 style);
    sized ("sized:16"): a budget too (so `dynamic` holds), the tree chosen each round by treesize.py."""

    branching: tuple[int, ...] = ()
    budget: int = 0  # > 0: dynamic (or sized)
    sized: bool = False  # the budget is a cap: treesize.py picks the tree each round (Sequoia)
    confidence: bool = False  # the budget is a cap: nodes added while their path probability pays for their rows

    def __post_init__(self) -> None:
        b = tuple(self.branching)
        if (
            len(b) > MAX_TREE_DEPTH
            or not all(is_int(x) and 1 <= x <= MAX_TREE_WIDTH for x in b)
            or bool(b) == bool(self.budget)
        ):
            raise PlaygroundError(
                f"tree: each depth takes 1 to {MAX_TREE_WIDTH} children, at most {MAX_TREE_DEPTH} depths "
                f"(or 'dynamic:N' / 'sized:N'), got {shown('-'.join(map(str, b)) or self.budget)}."
            )
        if self.budget and (not is_int(self.budget) or not 2 <= self.budget <= MAX_TREE_NODES):
            raise PlaygroundError(
                f"tree: a {'sized' if self.sized else 'confidence' if self.confidence else 'dynamic'} tree's node "
                f"{'cap' if self.sized else 'budget'} must be from 2 to {MAX_TREE_NODES}, got {shown(self.budget)}."
            )
        if self.sized is not bool(self.sized) or (self.sized and not self.budget):
            raise PlaygroundError(f"tree: a sized tree takes a node cap ('sized:N'), got {shown(self.sized)}.")
        if self.confidence is not bool(self.confidence) or (self.confidence and (self.sized or not self.budget)):
            raise PlaygroundError("tree: a confidence-shaped tree takes a node cap ('confidence:N'), alone.")
        object.__setattr__(self, "branching", tuple(int(x) for x in b))
        object.__setattr__(self, "budget", int(self.budget))
        if self.nodes > MAX_TREE_NODES:
            raise PlaygroundError(
                f"tree: {shown(self.label)} has {self.nodes} nodes; the target scores at most {MAX_TREE_NODES} at once."
            )

    @property
    def dynamic(self) -> bool:
        return self.budget > 0

    @property
    def nodes(self) -> int:
        """Draft tokens in a full tree of this shape (a dynamic tree's budget)."""
        return self.budget or sum(math.prod(self.branching[: d + 1]) for d in range(len(self.branching)))

    @property
    def depth(self) -> int:
        """The longest path a round can accept."""
        return min(self.budget, MAX_TREE_DEPTH) if self.dynamic else len(self.branching)

    @property
    def costed(self) -> bool:
        """Whether the tree is shaped each round by the measured costs (sized, confidence): the runner measures them."""
        return self.sized or self.confidence

    @property
    def label(self) -> str:
        if self.confidence:
            return f"confidence:{self.budget}"
        if self.sized:
            return f"sized:{self.budget}"
        return f"dynamic:{self.budget}" if self.dynamic else "-".join(map(str, self.branching))


MAX_TREE_CHARS = 100  # a tree box longer than this is refused before it is read

# children per depth ("3-2-1-1") or a node budget ("dynamic:16", "sized:16"), in the ASCII digits 0-9 only:
# str.isdigit() also takes "²" and "①" (which int() refuses) and int() takes other scripts' digits ("٣")
_STATIC = re.compile(r"[0-9]{1,3}(?:-[0-9]{1,3})*", re.ASCII)
_DYNAMIC = re.compile(r"(dynamic|sized|confidence):([0-9]{1,3})", re.ASCII)
EXAMPLES = "'3-2-1-1', 'dynamic:16', 'sized:16' or 'confidence:16'"


def parse_tree(value: object) -> TreeShape | None:
    """A token tree: "" / "chain" / None -> none; "3-2-1-1" -> static (children per depth); "dynamic:16" -> dynamic;
    "sized:16" -> sized by the measured costs, at most 16 nodes ("sized" alone: SIZED_NODES); "confidence:16" ->
    shaped by the draft's path probabilities and the measured costs ("confidence" alone: SIZED_NODES)."""
    if value is None or isinstance(value, TreeShape):
        return value
    if not isinstance(value, str):
        raise PlaygroundError(f"tree: give the tree as text, e.g. {EXAMPLES}, got {shown(value)}.")
    if len(value) > MAX_TREE_CHARS:
        raise PlaygroundError(
            f"tree: too long ({len(value):,} characters; at most {MAX_TREE_CHARS}): write children "
            f"per depth, e.g. '3-2-1-1', or 'dynamic:N' or 'sized:N'."
        )
    text = value.strip().lower().replace(" ", "")
    if text in ("", "chain", "none"):
        return None
    if text in ("sized", "confidence"):
        return TreeShape(budget=SIZED_NODES, sized=text == "sized", confidence=text == "confidence")
    if budgeted := _DYNAMIC.fullmatch(text):
        kind = budgeted.group(1)
        return TreeShape(budget=int(budgeted.group(2)), sized=kind == "sized", confidence=kind == "confidence")
    if not _STATIC.fullmatch(text):
        raise PlaygroundError(
            f"tree: write children per depth in the digits 0-9 (1 to {MAX_TREE_WIDTH} each), e.g. "
            f"'3-2-1-1', or 'dynamic:N' / 'sized:N' / 'confidence:N' with N from 2 to {MAX_TREE_NODES} ('sized' or "
            f"'confidence' alone: at most {SIZED_NODES} nodes, shaped by the measured costs); got {shown(value)}."
        )
    return TreeShape(tuple(int(x) for x in text.split("-")))
