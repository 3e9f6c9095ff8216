"""What one draft/verify round leaves behind: plain data, no torch, so that the trace, the views,
the benchmark report and the tests can read it without a model."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar, Union


# ---------------------------------------------------------------- a strategy's own part of a round

@dataclass
class CrossExtras:
    """A cross-tokenizer draft (decoding/cross.py; its own tokenizer, draft_tokens being its proposal translated
    into the target's tokens): the draft side of the round. text: the text the draft proposed; pieces: the
    draft's own tokens, each as the text it added (some may have fallen beyond the translated part); source:
    per entry of draft_tokens, the draft pieces whose text overlaps it."""

    PREFIX: ClassVar[str] = "draft_"  # the trace's column names: draft_text, draft_pieces, draft_source
    text: str = ""
    pieces: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)


@dataclass
class TreeExtras:
    """A token-tree round (decoding/tree.py): draft_tokens, p and q hold every node of the tree (k = the node
    count; p and q of a node under its parent's context), ordered: the accepted path first (so
    draft_tokens[:accepted] is what was kept, as for a chain), then the children of the path's last node (tried
    and rejected), then the rest breadth first; a parent always comes before its children. parents: the parent
    of each node (-1: the sequence's last token, the root); path: the accepted path's nodes. `token` follows
    the path: a correction, or a bonus when the path ends at a leaf."""

    PREFIX: ClassVar[str] = "tree_"
    parents: list[int] = field(default_factory=list)
    path: list[int] = field(default_factory=list)


@dataclass
class StagedExtras:
    """Staged drafting (decoding/staged.py), its first level: tokens prompt lookup proposed to the draft model
    this round, how many of them the draft model kept, and the draft model's forward passes."""

    PREFIX: ClassVar[str] = "stage_"
    proposed: int = 0
    accepted: int = 0
    passes: int = 0


Extras = Union[CrossExtras, TreeExtras, StagedExtras]
EXTRAS = (CrossExtras, TreeExtras, StagedExtras)


def flat_extras(extras: Extras | None) -> dict:
    """Every extras type's fields under its prefixed name, this round's values where it has them, else the
    defaults: the trace's columns do not depend on the strategy that ran."""
    out: dict = {}
    for cls in EXTRAS:
        values = asdict(extras if isinstance(extras, cls) else cls())
        out.update({cls.PREFIX + name: value for name, value in values.items()})
    return out


# ---------------------------------------------------------------- the round

@dataclass
class RoundRecord:
    """One draft/verify round, as it happened."""

    round: int
    k: int  # tokens drafted this round (0 for a plain target step)
    draft_tokens: list[int]
    accepted: int  # n: how many of draft_tokens the target kept
    token: int  # the target's own token after the kept prefix
    token_kind: str  # "correction" (n < k), "bonus" (n == k > 0) or "target" (k == 0)
    new_tokens: list[int]  # appended to the output this round (cut at EOS / the token limit)
    draft_s: float
    verify_s: float
    total_new: int  # output length after this round
    p: list[float] = field(default_factory=list)  # draft prob of each draft token
    q: list[float] = field(default_factory=list)  # target prob of each draft token
    u: list[float] = field(default_factory=list)  # uniform draws of the rule (sampling only)
    token_q: float = float("nan")  # target prob of `token`
    # The target's top-1 minus top-2 logit at the position of each token in new_tokens (greedy runs with
    # record on): how close each decision was. A low-precision run can flip a near-tie (see trace.first_difference).
    margins: list[float] = field(default_factory=list)
    # With DecodeConfig.explain: per position 0..k, [(token, p, q)], the position's own token first
    # (the draft token; at position k, the bonus), then the likeliest others under p or q;
    # and the residual norm(max(0, q - p)) at the rejected position, [(token, r)], when sampling.
    alternatives: list[list[tuple[int, float, float]]] = field(default_factory=list)
    residual: list[tuple[int, float]] = field(default_factory=list)
    stop: str = ""  # "eos", "length" when this round ended the run
    prefill: int = 0  # tokens the target scored in this pass beyond the k + 1 (the prompt, in round 0)
    extras: Extras | None = None  # what the strategy adds to the round (cross-tokenizer, tree, staged)

    @property
    def tree(self) -> TreeExtras | None:
        """The tree of a token-tree round, else None."""
        return self.extras if isinstance(self.extras, TreeExtras) else None

    @property
    def is_tree(self) -> bool:
        return self.tree is not None and bool(self.tree.parents)

    @property
    def seconds(self) -> float:
        return self.draft_s + self.verify_s

    def as_dict(self) -> dict:
        """The round as flat plain data (the trace's CSV and JSON): every field, the extras under their prefixed
        names (draft_text, tree_parents, stage_proposed, ...: COLUMNS)."""
        out = asdict(self)  # deep copies of the lists
        del out["extras"]
        return out | flat_extras(self.extras)


COLUMNS = [f.name for f in fields(RoundRecord) if f.name != "extras"] + list(flat_extras(None))
