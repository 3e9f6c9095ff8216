"""Lookahead decoding (Fu et al. 2024, "Break the Sequential Dependency of LLM Inference Using Lookahead
Decoding"; the reference implementation is hao-ai-lab/LookaheadDecoding, `lade`): no draft model. The target
runs its own Jacobi iterations on a window of guessed future tokens, keeps the n-grams their trajectories
produce in a pool, and verifies the pool's n-grams that start with the sequence's last token, all in one pass.

The window: N - 1 levels of W columns (column c guesses the token c positions after the last one). Level 0 holds
columns 1..W-1 (its column 0 is the sequence's last token, the root), levels 1..N-2 columns 0..W-1, each level one
Jacobi iteration newer than the one below it. In the pass, the token at (level l, column c) sits at position
root + c + l and sees the sequence, level 0's columns 1..c and the tokens of levels 1..l in its own column
(lade's attention mask); the target's argmax there, at the top level, is the next iteration's guess. Column c's
trajectory, (level 0 .. level N-2 at column c, the new guess), is an n-gram, added to the pool under its first
token, at most G per first token (the least recently added dropped first). Then the levels shift down one (level 1
less its column 0 becomes level 0, the new guesses the top level: one position per round, lade's ALWAYS_FWD_ONE).
Level 0 starts as W + N - 3 tokens picked from the prompt (a fixed seed), and the first N - 2 rounds fill the
levels above it, each dropping a column. With the prompt pool on (lade's POOL_FROM_PROMPT) the pool also holds
the prompt's n-grams and, as it grows, the output's.

The verification branch: the pool's continuations of the root, merged into a token tree (candidates.merge), in
the same pass; the tree sees the sequence and its own ancestors, the window sees none of it and it sees none of
the window. Greedy keeps the longest path of the target's argmaxes, exactly the target alone; sampling uses
acceptance.select_candidate at each node, the lossless rule of lade's sampling mode (the candidates are one-hot drafts read
before the pass). The window itself follows the target's argmax whatever the temperature: it only proposes.
The k policy does not apply: a draft is at most N - 1 tokens deep (fewer at the token limit).
"""

from __future__ import annotations

import random
import sys
from collections import OrderedDict
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel

from playground.core.config import DrafterKind
from playground.decoding.chain import ChainDraft
from playground.decoding.candidates import CandidateDraft, merge
from playground.decoding.tree import _ancestry, check_tree_model
from playground.core.draft import Draft, Drafter
from playground.core.records import LookaheadExtras, RoundRecord
from playground.core.sizes import plain_bytes
from playground.core.config import SamplingParams

WINDOW, SEQUENCE = "window", "sequence"  # where a pool n-gram came from (LookaheadExtras.source)
INIT_SEED = 0  # the first level-0 guesses are prompt tokens picked with this seed (lade picks at random)


class Pool:
    """The n-gram pool: per first token, at most `size` continuations (N - 1 tokens), each with where it came
    from and the round it was added; adding one again makes it the most recent. Its bytes are counted as it
    changes (nbytes): the sessions' budget reads them without a walk."""

    def __init__(self, size: int):
        self.size = size
        self.grams: dict[int, OrderedDict[tuple[int, ...], tuple[str, int]]] = {}
        self._bytes = 0  # its tables' and n-grams' bytes, kept up to date by add()

    def add(self, key: int, continuation: tuple[int, ...], source: str, round_: int) -> None:
        grams, before = self.grams.get(key), 0
        if grams is None:
            table = sys.getsizeof(self.grams)
            grams = self.grams[key] = OrderedDict()
            # a sequence n-gram's key is the sequence's own int, counted with the n-gram that ends there
            self._bytes += sys.getsizeof(self.grams) - table + (int_bytes(key) if source != SEQUENCE else 0)
        else:
            before = sys.getsizeof(grams)
        if (old := grams.pop(continuation, None)) is not None:
            self._bytes -= gram_bytes(continuation, *old)
        grams[continuation] = (source, round_)
        self._bytes += gram_bytes(continuation, source, round_)
        if len(grams) > self.size:
            gone, old = grams.popitem(last=False)
            self._bytes -= gram_bytes(gone, *old)
        self._bytes += sys.getsizeof(grams) - before  # its table and links (an OrderedDict's getsizeof has them)

    def get(self, key: int) -> list[tuple[tuple[int, ...], str, int]]:
        """The continuations of `key`, the least recently added first (lade's order)."""
        return [(cont, source, round_) for cont, (source, round_) in self.grams.get(key, {}).items()]

    def __len__(self) -> int:
        return sum(len(g) for g in self.grams.values())

    def nbytes(self) -> int:
        """Bytes of its n-grams and tables, as counted when they were added: no walk."""
        return self._bytes + sys.getsizeof(self.grams)


def int_bytes(token: int) -> int:
    """An int's own bytes: 0 for CPython's shared small ints."""
    return 0 if -5 <= token <= 256 else sys.getsizeof(token)


def gram_bytes(continuation: tuple[int, ...], source: str, round_: int) -> int:
    """An n-gram entry's own objects: its continuation, its (source, round) pair, the round and the continuation's
    ints; the source is one of two shared strings. A sequence n-gram holds the sequence's own ints, which its
    neighbours hold too: it owns only its last (the others are its predecessors')."""
    tokens = continuation[-1:] if source == SEQUENCE else continuation
    return sys.getsizeof(continuation) + sum(int_bytes(t) for t in tokens) + PAIR_BYTES + int_bytes(round_)


PAIR_BYTES = sys.getsizeof(("", 0))


def window_layout(levels: list[list[int]]) -> tuple[list[int], list[int], torch.Tensor, list[int]]:
    """The window's tokens in feed order (level 0, then level 1, ...), each one's distance from the root
    (column + level), the mask among them ([i, j]: token i sees token j) and the feed indices of the top level's
    columns (for level 0 on its own, the root's column 0 is not in the window: its index is -1)."""
    coords = [(level, column + (level == 0)) for level, row in enumerate(levels) for column in range(len(row))]
    tokens = [t for row in levels for t in row]
    index = {coord: i for i, coord in enumerate(coords)}
    allowed = torch.zeros(len(coords), len(coords), dtype=torch.bool)
    for i, (level, column) in enumerate(coords):
        for c in range(1, column + 1):
            allowed[i, index[(0, c)]] = True
        for l in range(1, level + 1):
            allowed[i, index[(l, column)]] = True
    top = len(levels) - 1
    rows = ([-1] if top == 0 else []) + [i for i, (level, _) in enumerate(coords) if level == top]
    return tokens, [column + level for level, column in coords], allowed, rows


def pass_mask(
    prefix: int, queries: int, window: torch.Tensor, ancestry: torch.Tensor, dtype: torch.dtype, device
) -> torch.Tensor:
    """(1, 1, rows, prefix + rows) additive mask of the pass: `queries` sequence tokens (causal, ending at the
    root) after `prefix` cached ones, then the window (A tokens, `window` among them) and the tree (T nodes,
    `ancestry` among them); both see the whole sequence and not each other."""
    A, T = window.shape[0], ancestry.shape[0]
    rows = queries + A + T
    allowed = torch.zeros(rows, prefix + rows, dtype=torch.bool)
    allowed[:, :prefix] = True
    allowed[:queries, prefix : prefix + queries] = torch.ones(queries, queries, dtype=torch.bool).tril()
    allowed[queries:, prefix : prefix + queries] = True
    start = prefix + queries
    allowed[queries : queries + A, start : start + A] = window
    allowed[queries + A :, start + A :] = ancestry
    mask = torch.zeros(rows, prefix + rows, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return mask.to(device)[None, None]


@dataclass
class LookaheadDraft(CandidateDraft):
    """The pool's candidates as a tree (CandidateDraft) and the window that runs in the same pass. After verify():
    `outputs`, the target's argmax at each column of the top level (the next iteration's guesses)."""

    levels: list[list[int]] = field(default_factory=list)
    root: int = 0
    sources: list[tuple[str, int]] = field(default_factory=list)  # per tree node: its n-gram's (source, round)
    outputs: list[int] = field(default_factory=list)

    def score(self, target: PreTrainedModel, cache: DynamicCache, ids: torch.Tensor, cached: int) -> torch.Tensor:
        """One pass: the uncached sequence, the window, the tree. Returns the root's and the nodes' logits."""
        device, length, tree = ids.device, ids.shape[1], self.tree
        tokens, distance, window, top = window_layout(self.levels)
        A, T, queries = len(tokens), len(tree), length - cached
        self.offset = A
        feed = torch.cat([ids[:, cached:], torch.tensor([tokens + tree.tokens], dtype=ids.dtype, device=device)], 1)
        positions = torch.tensor(
            [list(range(cached, length)) + [length - 1 + d for d in distance] + [length - 1 + d for d in tree.depths]],
            device=device,
        )
        mask = pass_mask(cached, queries, window, _ancestry(tree.parents), target.dtype, device)
        top_rows = [queries + i for i in top if i >= 0]
        keep = torch.tensor([queries - 1] + top_rows + [queries + A + i for i in range(T)], device=device)
        logits = target(
            input_ids=feed,
            position_ids=positions,
            attention_mask=mask,
            cache=cache,
            use_cache=True,
            logits_to_keep=keep,
        ).logits[0]
        guesses = logits[: 1 + len(top_rows)].argmax(-1).tolist()  # the root first, then the top level
        self.outputs = guesses if top[0] < 0 else guesses[1:]
        return torch.cat([logits[:1], logits[1 + len(top_rows) :]])


class LookaheadDrafter(Drafter):
    """Lookahead decoding with window W, n-gram size N and verification budget G (the module's docstring)."""

    name = DrafterKind.LOOKAHEAD.value

    def __init__(
        self, target: PreTrainedModel, window: int = 5, ngram: int = 3, guesses: int = 3, prompt_pool: bool = False
    ):
        check_tree_model(target)  # one pass with a custom mask and position ids, as a token tree's
        self.W, self.N, self.G, self.prompt_pool = window, ngram, guesses, prompt_pool
        self.reset()

    def reset(self) -> None:
        self.levels: list[list[int]] | None = None
        self.pool = Pool(self.G)
        self.seen = 0  # tokens of the sequence whose n-grams the prompt pool holds
        self.round = 0  # passes that ran a window
        self.draft: LookaheadDraft | None = None

    def depth(self, k: int) -> int:
        return self.N - 1  # the n-grams' continuations set the depth, whatever the k policy says

    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        seq = ids[0].tolist()
        if self.levels is None:
            pick = random.Random(INIT_SEED)
            self.levels = [[pick.choice(seq) for _ in range(self.W + self.N - 3)]]
        if self.prompt_pool:
            for i in range(max(0, self.seen - self.N + 1), len(seq) - self.N + 1):
                self.pool.add(seq[i], tuple(seq[i + 1 : i + self.N]), SEQUENCE, self.round if self.seen else -1)
            self.seen = len(seq)
        if k == 0:  # the token limit leaves one token: a plain step, no window
            self.draft = None
            return ChainDraft(ids.new_empty(0), None)
        found = self.pool.get(seq[-1])
        tree, owner = merge([list(cont[:k]) for cont, _, _ in found])
        self.draft = LookaheadDraft(
            torch.tensor(tree.tokens, dtype=torch.long, device=ids.device),
            None,
            tree,
            len(seq),
            levels=[list(level) for level in self.levels],
            root=seq[-1],
            sources=[found[i][1:] for i in owner],
        )
        return self.draft

    def nbytes(self) -> int:
        return self.pool.nbytes() + plain_bytes(self.levels)  # the window's levels: a few short lists

    def annotate(self, record: RoundRecord) -> None:
        """Collect the window's n-grams, shift it, and describe the round (LookaheadExtras)."""
        d = self.draft
        if d is None:
            return
        levels, out, added = d.levels, d.outputs, 0
        if len(levels) == self.N - 1:  # a full window: every column's trajectory is an n-gram
            for column, guess in enumerate(out):
                key = d.root if column == 0 else levels[0][column - 1]
                self.pool.add(key, tuple(level[column] for level in levels[1:]) + (guess,), WINDOW, self.round)
                added += 1
            self.levels = [levels[1][1:]] + levels[2:] + [out] if len(levels) > 1 else [out[1:]]
        else:  # still filling: every level loses its first column, the new guesses become a level
            self.levels = [level[1:] for level in levels] + [out[1:]]
        base = record.tree
        sources = [d.sources[i] for i in d.order]
        record.extras = LookaheadExtras(
            parents=list(base.parents),
            path=list(base.path),
            source=[s for s, _ in sources],
            collected=[r for _, r in sources],
            window=levels,
            ngrams=added,
            pool=len(self.pool),
            width=d.offset + len(d.tree),
        )
        self.round += 1
