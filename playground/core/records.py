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
    ALWAYS: ClassVar[bool] = True  # its columns in every round's dict (flat_extras)
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
    ALWAYS: ClassVar[bool] = True
    parents: list[int] = field(default_factory=list)
    path: list[int] = field(default_factory=list)


@dataclass
class SizedExtras(TreeExtras):
    """A round of a tree sized by the measured costs (DecodeConfig.tree "sized:N", playground/engine/treesize.py): the
    plan it drafted and why. expected: the tokens per round the plan expected (the target's own included); steps:
    its expected time in target steps (the draft's passes and the target's, from the measured costs); widths: its
    planned nodes per depth (the drafted tree may hold fewer: a node has no more children than tokens of p > 0);
    acceptance: p_1, p_2, ..., the acceptance by rank it was planned with; chain_k, chain_expected, chain_steps: the
    best chain under the same model, for comparison."""

    PREFIX: ClassVar[str] = "sized_"
    ALWAYS: ClassVar[bool] = False
    STATES: ClassVar[tuple[str, ...]] = ("chain_k",)
    expected: float = 0.0
    steps: float = 0.0
    widths: list[int] = field(default_factory=list)
    acceptance: list[float] = field(default_factory=list)
    chain_k: int = 0
    chain_expected: float = 0.0
    chain_steps: float = 0.0


@dataclass
class StagedExtras:
    """Staged drafting (decoding/staged.py), its first level: tokens prompt lookup proposed to the draft model
    this round, how many of them the draft model kept, and the draft model's forward passes."""

    PREFIX: ClassVar[str] = "stage_"
    ALWAYS: ClassVar[bool] = True
    proposed: int = 0
    accepted: int = 0
    passes: int = 0


@dataclass
class SuffixExtras(TreeExtras):
    """A suffix-decoding round (decoding/suffix.py): what its draft was read from. A tree round fills parents and
    path (TreeExtras; nodes in the record's order), a chain leaves them empty. match: how many of the sequence's
    last tokens were found in the suffix tree (0: no match, no draft); store: "this run" (the prompt and the
    output so far) or "session memory" (earlier runs' outputs); score: the draft's expected number of accepted
    tokens under the tree's frequencies (the sum of `prob`); prob and count per entry of draft_tokens: the
    frequency estimate of the path to it (the product of count(child) / count(parent) along it) and how often
    its continuation was seen."""

    PREFIX: ClassVar[str] = "suffix_"
    ALWAYS: ClassVar[bool] = False
    STATES: ClassVar[tuple[str, ...]] = ("match",)  # a round's state, not a count: never summed over a run
    match: int = 0
    store: str = ""
    score: float = 0.0
    prob: list[float] = field(default_factory=list)
    count: list[int] = field(default_factory=list)

    def kept(self, accepted: int) -> list[str]:
        """Where each of the round's `accepted` kept drafts came from: all from the one store."""
        return [self.store] * accepted


@dataclass
class LookaheadExtras(TreeExtras):
    """A lookahead-decoding round (decoding/lookahead.py). Its draft is a tree of the n-grams the pool holds for
    the sequence's last token (TreeExtras; nodes in the record's order). Per node, source: where its n-gram came
    from ("window": collected from the Jacobi window's trajectory; "prompt": an n-gram of the prompt or output,
    with the prompt pool on) and collected: the round that put it in the pool (-1 for the prompt's n-grams).
    window: the Jacobi window this round ran in the same pass, level by level (level 0 starts at column 1: its
    column 0 is the sequence's last token); ngrams: n-grams the window added to the pool (or refreshed); pool:
    n-grams the pool held after the round; width: tokens the pass scored beyond the sequence (window + nodes)."""

    PREFIX: ClassVar[str] = "lookahead_"
    ALWAYS: ClassVar[bool] = False
    STATES: ClassVar[tuple[str, ...]] = ("pool",)
    source: list[str] = field(default_factory=list)
    collected: list[int] = field(default_factory=list)
    window: list[list[int]] = field(default_factory=list)
    ngrams: int = 0
    pool: int = 0
    width: int = 0

    def kept(self, accepted: int) -> list[str]:
        """Where each of the round's `accepted` kept drafts came from (the kept path comes first)."""
        return list(self.source[:accepted])


Extras = Union[CrossExtras, TreeExtras, SizedExtras, StagedExtras, SuffixExtras, LookaheadExtras]
EXTRAS = (CrossExtras, TreeExtras, SizedExtras, StagedExtras, SuffixExtras, LookaheadExtras)


def flat_extras(extras: Extras | None, every: bool = True) -> dict:
    """Every extras type's fields under its prefixed name, this round's values where it has them, else the
    defaults: the trace's columns do not depend on the strategy that ran. A subclass fills its base's columns
    too (a suffix or lookahead tree is a TreeExtras). With every=False (a round's own dict): the types whose
    ALWAYS is False add their columns only to their own rounds, so that a big per-round list (a lookahead
    window) stays out of every other round, and the rounds of the older strategies read as they did."""
    out: dict = {}
    for cls in EXTRAS:
        if isinstance(extras, cls) or every or cls.ALWAYS:
            values = asdict(extras if isinstance(extras, cls) else cls())
            out.update({cls.PREFIX + name: values[name] for name in _own_fields(cls)})
    return out


def counts(extras: Extras | None) -> dict:
    """The extras' whole-number fields a run sums (trace.extras_totals), under their prefixed names: those whose
    declared default is an int (a float field that holds a whole number in some round is not one); a type's
    STATES (a size, a length: a round's state) are left out."""
    states = {cls.PREFIX + name for cls in EXTRAS for name in getattr(cls, "STATES", ())}
    summed = {key for key, value in flat_extras(None).items() if type(value) is int and key not in states}
    return {key: value for key, value in flat_extras(extras).items() if key in summed}


def columns(cls: type) -> dict[str, str]:
    """An extras type's fields -> their flat column names (flat_extras: a field it inherits, under its base's prefix)."""
    return {name: base.PREFIX + name for base in cls.__mro__[::-1] if base in EXTRAS for name in _own_fields(base)}


def stated(row: dict, cls: type) -> bool:
    """Whether a flat row (as_dict) holds other than the default in one of the extras type's own fields."""
    default = cls()
    return any(row.get(cls.PREFIX + n, getattr(default, n)) != getattr(default, n) for n in _own_fields(cls))


def _own_fields(cls: type) -> list[str]:
    """A dataclass's fields less those of the extras type it extends (their columns are its base's)."""
    inherited = {f.name for base in cls.__mro__[1:] if base in EXTRAS for f in fields(base)}
    return [f.name for f in fields(cls) if f.name not in inherited]


# ---------------------------------------------------------------- the round

LOADED = 0.5  # cores' worth of other processes' CPU from which a round counts as run under load (a thread less)


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
    # record on): how close each decision was. A low-precision run can flip a near-tie (see sametext.first_difference).
    margins: list[float] = field(default_factory=list)
    # With DecodeConfig.explain: per position 0..k, [(token, p, q)], the position's own token first
    # (the draft token; at position k, the bonus), then the likeliest others under p or q;
    # and the residual norm(max(0, q - p)) at the rejected position, [(token, r)], when sampling.
    alternatives: list[list[tuple[int, float, float]]] = field(default_factory=list)
    residual: list[tuple[int, float]] = field(default_factory=list)
    stop: str = ""  # "eos", "length" when this round ended the run
    prefill: int = 0  # tokens the target scored in this pass beyond the k + 1 (the prompt, in round 0)
    # The machine as the round started (playground/engine/threads.py): the threads it ran on (0: not recorded) and the
    # cores' worth of CPU that other processes used just before (load >= LOADED: the round ran under load).
    threads: int = 0
    load: float = 0.0
    extras: Extras | None = (
        None  # what the strategy adds to the round (cross-tokenizer, tree, staged, suffix, lookahead)
    )

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
        return out | flat_extras(self.extras, every=False)


COLUMNS = [f.name for f in fields(RoundRecord) if f.name != "extras"] + list(flat_extras(None))
