"""Suffix decoding (playground/decoding/suffix.py): the suffix tree's counts, the drafting rule (match lengths,
max_spec_factor, min_token_prob, the best score), greedy output equal to the target alone for chains and trees,
the sampling law by chi-square, the session memory (opt-in, never touched by a warm-up), the records."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from playground import trace
from playground.decoding import make_drafter
from playground.decoding.suffix import MEMORY, THIS_RUN, SuffixDrafter, SuffixMemory, SuffixTree, chain, grow_tree
from playground.run.runner import encode_prompt
from playground.core.config import DrafterKind
from playground.run.spec import DrafterSpec, RunSpec
from playground.core.treeshape import parse_tree
from tests.helpers import run_all, CHI2_999, PROMPTS, REPEAT, branching_prompt, decode, target_greedy, two_token_test


def suffix(**options) -> DrafterSpec:
    return DrafterSpec.of(DrafterKind.SUFFIX, **{f"suffix_{k}": v for k, v in options.items()})


# ---------------------------------------------------------------- the suffix tree and the rule


def test_the_suffix_tree_counts_every_stretch_up_to_its_depth():
    rng = random.Random(0)
    for depth in (1, 3, 6):
        seqs = {s: [rng.randrange(4) for _ in range(rng.randrange(1, 40))] for s in range(3)}
        tree = SuffixTree(depth)
        for s, seq in seqs.items():  # in pieces: extend() continues a sequence where it stopped
            for i in range(0, len(seq), 7):
                tree.extend(s, seq[i : i + 7])
        want = Counter(
            tuple(seq[i : i + n]) for seq in seqs.values() for n in range(1, depth + 1) for i in range(len(seq) - n + 1)
        )

        def walk(node, prefix):
            for token, child in tree.children[node].items():
                yield prefix + (token,), tree.count[child]
                yield from walk(child, prefix + (token,))

        assert dict(walk(0, ())) == dict(want)
        assert max(tree.level) <= depth


def test_a_chain_follows_the_most_frequent_continuation_until_its_estimate_is_too_low():
    tree = SuffixTree(8)
    #            a  b  X  Y   a  b  X  Z   a  b  W   a  b
    tree.extend(0, [1, 2, 7, 8, 1, 2, 7, 9, 1, 2, 6, 1, 2])
    matches = tree.matches([5, 1, 2])
    assert [m for m, _ in matches] == [1, 2]  # "b", "a b"; "5 a b" never occurred
    node = matches[-1][1]
    assert tree.count[node] == 4  # "a b" four times (the last one has no continuation yet)
    out = chain(tree, node, 5, min_prob=0.1)
    assert out.tokens == [7, 8, 1, 2, 7] and out.count == [2, 1, 1, 1, 1]  # X, then Y (the first seen of X's two)
    assert out.prob == pytest.approx([2 / 4, 1 / 4, 1 / 4, 1 / 4, 1 / 4])  # X: 2 of 4; Y: 1 of 2; then 1 of 1
    assert chain(tree, node, 5, min_prob=0.3).tokens == [7]  # the estimate 1/4 falls under 0.3: stop
    assert chain(tree, node, 1, min_prob=0.0).tokens == [7]  # the cap


def test_the_draft_length_follows_the_match_length_and_the_factor():
    seq = [3, 1, 4, 1, 5, 9, 2, 6, 7, 8, 3, 1, 4]  # "3 1 4" once before, then each continuation seen once of two
    for factor, want in ((1.0, 3), (0.5, 1), (2.0, 6)):
        drafter = SuffixDrafter(factor=factor, min_prob=0.0)
        drafter.tree.extend(0, seq)
        best = drafter.speculate(seq, 16)
        assert best.match == 3 and best.store == THIS_RUN  # the longest match scores best (its estimates are equal)
        assert best.tokens == [1, 5, 9, 2, 6, 7][:want]  # floor(factor * m) tokens
        assert best.prob == pytest.approx([0.5] * want) and best.score == pytest.approx(want / 2)
    assert SuffixDrafter().speculate(seq, 0).tokens == []  # k = 0: no draft
    fresh = SuffixDrafter()
    fresh.tree.extend(0, [1, 2, 3, 4])
    assert fresh.speculate([1, 2, 3, 4], 8).tokens == []  # nothing repeats: nothing to propose


def test_a_tree_grows_best_first_within_its_shape():
    tree = SuffixTree(8)
    tree.extend(0, [1, 2, 7, 8, 1, 2, 7, 9, 1, 2, 6, 1, 2, 7, 8, 1, 2])
    node = tree.matches([1, 2])[-1][1]
    out = grow_tree(tree, node, budget=4, min_prob=0.0, shape=parse_tree("dynamic:4"), depth=3)
    assert out.tokens[0] == 7 and out.parents[0] == -1  # the likeliest first
    assert all(p < i for i, p in enumerate(out.parents)) and len(out.tokens) == 4
    assert out.prob == sorted(out.prob, reverse=True)  # taken in order of the estimate
    narrow = grow_tree(tree, node, budget=9, min_prob=0.0, shape=parse_tree("1-1"), depth=2)
    assert narrow.tokens == [7, 8] and narrow.parents == [-1, 0]  # one child per node, two levels


# ---------------------------------------------------------------- lossless


@pytest.mark.parametrize(
    "spec, tree",
    [
        (suffix(), None),
        (suffix(min_prob=0.0, factor=4.0), None),
        (suffix(), "dynamic:8"),
        (suffix(min_prob=0.0), "3-2-1"),
    ],
)
def test_greedy_suffix_output_equals_target_generate(tiny_pair, loop_pair, spec, tree):
    accepted = 0
    for pair, prompts, lengths in ((tiny_pair, PROMPTS + [REPEAT], [1, 2, 7, 40]), (loop_pair, PROMPTS[:3], [60])):
        for i, prompt in enumerate(prompts):
            ids = encode_prompt(pair.tokenizer, prompt)
            max_new = lengths[i % len(lengths)]  # 1 and 2 leave less budget than k
            drafter = make_drafter(spec, pair, tree=parse_tree(tree))
            dec, rounds = decode(pair, drafter, ids, max_new_tokens=max_new, k=6, tree=tree)
            assert dec.new_tokens == target_greedy(pair.target, ids, max_new, pair.eos), (prompt, spec.label, tree)
            accepted += sum(r.accepted for r in rounds)
            assert all(r.k <= 6 for r in rounds) or tree
    assert accepted > 40  # the looping target repeats itself: suffix decoding drafts from its own output


@pytest.mark.parametrize("tree", [None, "dynamic:6"])
def test_suffix_sampling_follows_the_target_distribution(loop_pair, tree):
    """The first two tokens of 800 seeded runs against the target's exact joint law: a draft at the first round
    (t1; a tree: t1 and t2, both tried in turn), kept or not by the one-hot rule (chain.verify or
    acceptance.select_candidate)."""
    ids = branching_prompt(loop_pair)
    first = []
    stat, df = two_token_test(
        loop_pair,
        lambda: make_drafter(suffix(min_prob=0.0), loop_pair, tree=parse_tree(tree)),
        ids,
        800,
        lambda seed, r: r.round or first.append((r.k, r.accepted)),
        max_new_tokens=2,
        temperature=1.5,
        top_k=4,
        k=4,
        tree=tree,
    )
    kept = sum(a for _, a in first)
    print(
        f"suffix {tree}: chi-square {stat:.1f} (df {df}, critical {CHI2_999[df]}); first-round drafts kept {kept} of 800"
    )
    assert stat < CHI2_999[df], (stat, df)
    assert {k for k, _ in first} == {1 if tree is None else 2} and 20 < kept < 780  # kept and refused, both


# ---------------------------------------------------------------- the session memory


def test_the_session_memory_drafts_an_earlier_run_again(tiny_pair):
    ids = encode_prompt(tiny_pair.tokenizer, PROMPTS[1])
    memory = SuffixMemory()
    first, first_rounds = decode(tiny_pair, SuffixDrafter(memory=memory), ids, eos=set(), max_new_tokens=40, k=8)
    assert memory.tree.seqs[0][: len(first.new_tokens)] == first.new_tokens  # what the run kept, in order
    again, rounds = decode(tiny_pair, SuffixDrafter(memory=memory), ids, eos=set(), max_new_tokens=40, k=8)
    alone, alone_rounds = decode(tiny_pair, SuffixDrafter(), ids, eos=set(), max_new_tokens=40, k=8)
    assert again.new_tokens == first.new_tokens == alone.new_tokens == target_greedy(tiny_pair.target, ids, 40, set())
    assert len(rounds) <= 10 < len(alone_rounds)  # the memory holds the answer: drafts of 8 kept whole
    assert {r.extras.store for r in rounds if r.k} == {MEMORY}
    assert sum(r.accepted for r in alone_rounds) == 0  # this random target does not repeat itself


def test_the_memory_forgets_its_oldest_runs_past_its_size():
    memory = SuffixMemory(depth=4, runs=2)
    for tokens in ([1, 2, 3], [4, 5, 6], [7, 8, 9]):
        memory.add(memory.begin(), tokens)
    assert sorted(memory.tree.seqs) == [1, 2] and 1 not in memory.tree.children[0]
    assert memory.tree.children[0].keys() == {4, 5, 6, 7, 8, 9}


def test_runs_stay_independent_unless_the_spec_asks_for_the_memory(tiny_spec, tiny_pair, runner):
    memory = SuffixMemory()
    off = tiny_spec("Once upon a time", suffix(), max_new_tokens=6)
    run_all(runner, off, kept=memory)  # warm-up (its own run) and the run itself: the memory stays empty
    assert memory.tree.seqs == {}
    on = tiny_spec("Once upon a time", suffix(memory=True), max_new_tokens=6)
    rounds = run_all(runner, on, kept=memory)
    assert list(memory.tree.seqs) == [0] and len(memory.tree.seqs[0]) >= 6  # this run only, not the warm-up
    assert on.drafter.label == "suffix decoding (session memory)" and rounds


# ---------------------------------------------------------------- records and the registry


def test_suffix_records_say_where_each_draft_came_from(loop_pair):
    ids = encode_prompt(loop_pair.tokenizer, PROMPTS[0])
    for tree in (None, "dynamic:6"):
        drafter = make_drafter(suffix(min_prob=0.0), loop_pair, tree=parse_tree(tree))
        _, rounds = decode(loop_pair, drafter, ids, max_new_tokens=40, k=6, tree=tree)
        drafted = [r for r in rounds if r.k]
        assert drafted and all(r.extras.match > 0 and r.extras.store == THIS_RUN for r in drafted)
        for r in rounds:
            x = r.extras
            assert len(x.prob) == len(x.count) == r.k and x.score == pytest.approx(sum(x.prob))
            assert all(0 < p <= 1 for p in x.prob) and all(c >= 1 for c in x.count)
            assert r.p == [1.0] * r.k  # one-hot: a deterministic draft
            assert r.is_tree == (tree is not None and r.k > 0)
            if not r.is_tree:
                assert x.prob == sorted(x.prob, reverse=True)  # a chain's estimate only falls
        row = rounds[-1].as_dict()
        assert {"suffix_match", "suffix_store", "suffix_prob"} <= set(row) and "lookahead_window" not in row
        frame = trace.frame(rounds)
        assert frame["suffix_match"].max() > 0


def test_the_registry_builds_suffix_decoding_with_a_tree_of_its_own(tiny_pair, tiny_spec):
    drafter = make_drafter(suffix(), tiny_pair, tree=parse_tree("2-2"))
    assert isinstance(drafter, SuffixDrafter) and drafter.shape.label == "2-2" and drafter.memory is None
    assert drafter.depth(4) == 2 and SuffixDrafter().depth(4) == 4  # a tree's depth, else the k policy's k
    spec = tiny_spec("x", suffix(), tree="dynamic:8")
    assert isinstance(spec, RunSpec) and spec.decode.tree.label == "dynamic:8"


def test_a_run_whose_rounds_found_no_match_still_sums_up(tiny_pair):
    """A round without a draft has score 0: the summary sums the extras' declared whole numbers only."""
    _, rounds = decode(tiny_pair, SuffixDrafter(), encode_prompt(tiny_pair.tokenizer, "x"), max_new_tokens=4)
    assert any(r.k == 0 for r in rounds) and all(isinstance(r.extras.score, float) for r in rounds)
    summary = trace.summarize(rounds)
    assert summary["tokens"] == 4 and "suffix_score" not in summary and "suffix_match" not in summary
