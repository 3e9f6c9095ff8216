"""Lookahead decoding (playground/decoding/lookahead.py): the window's mask and positions (each guess is the
target's own argmax for the context the mask gives it), the n-gram pool, greedy output equal to the target
alone, caches equal to a recompute, the sampling law by chi-square with a broken rule caught end to end, and
the records the views read."""

from __future__ import annotations

import copy

import pytest
import torch

from playground.engine import acceptance
from playground.decoding import make_drafter
from playground.decoding.lookahead import SEQUENCE, WINDOW, LookaheadDrafter, Pool, window_layout
from playground.engine import SpeculativeDecoder
from playground.core.errors import PlaygroundError
from playground.run.runner import encode_prompt
from playground.core.config import DecodeConfig, DrafterKind
from playground.run.spec import DrafterSpec
from playground.core.treeshape import parse_tree
from tests.helpers import (
    CHI2_999,
    PROMPTS,
    REPEAT,
    branching_prompt,
    broken_select,
    decode,
    target_greedy,
    two_token_test,
)

SETTINGS = [(5, 3, 3, False), (1, 2, 1, False), (4, 4, 2, False), (3, 5, 5, True), (6, 2, 8, True)]


def lookahead(w=5, n=3, g=3, pool=False) -> DrafterSpec:
    return DrafterSpec.of(
        DrafterKind.LOOKAHEAD, lookahead_window=w, lookahead_ngram=n, lookahead_guesses=g, lookahead_prompt_pool=pool
    )


def test_the_window_layout_gives_each_guess_its_column_and_its_trajectory():
    levels = [[10, 11], [20, 21, 22], [30, 31, 32]]  # level 0: columns 1-2; levels 1-2: columns 0-2
    tokens, distance, seen, top = window_layout(levels)
    assert tokens == [10, 11, 20, 21, 22, 30, 31, 32]
    assert distance == [1, 2, 1, 2, 3, 2, 3, 4]  # column + level, after the root
    names = ["0.1", "0.2", "1.0", "1.1", "1.2", "2.0", "2.1", "2.2"]
    sees = {names[i]: [names[j] for j in range(8) if seen[i, j]] for i in range(8)}
    assert sees["0.2"] == ["0.1", "0.2"]  # level 0: a causal chain after the root
    assert sees["1.0"] == ["1.0"]  # (and the sequence, outside the window)
    assert sees["2.2"] == ["0.1", "0.2", "1.2", "2.2"]  # level 0 up to its column, then its own column upwards
    assert top == [5, 6, 7]
    assert window_layout([[10, 11]])[3] == [-1, 0, 1]  # level 0 alone: the root's column comes first


def test_each_guess_is_the_target_argmax_for_the_context_its_mask_gives_it(tiny_pair):
    """Filling rounds and full rounds alike: the new guess at (top level, column c) is the target's argmax after
    the sequence, level 0's columns 1..c and the tokens of levels 1..top in column c, computed plainly."""
    ids = encode_prompt(tiny_pair.tokenizer, PROMPTS[0])
    drafter = LookaheadDrafter(tiny_pair.target, window=4, ngram=4, guesses=2, prompt_pool=True)
    dec = SpeculativeDecoder(tiny_pair.target, drafter, ids, DecodeConfig(max_new_tokens=12), set())
    for _ in range(5):
        seq = dec.ids[0].tolist()
        dec.step()
        d = drafter.draft
        for column, guess in enumerate(d.outputs):
            context = seq + d.levels[0][:column] + [level[column] for level in d.levels[1:]]
            with torch.inference_mode():
                logits = tiny_pair.target(input_ids=torch.tensor([context])).logits[0, -1]
            assert logits[guess] >= logits.max() - 1e-4, (len(d.levels), column)


def test_the_pool_keeps_the_most_recent_continuations_per_token():
    pool = Pool(2)
    pool.add(1, (2, 3), WINDOW, 0)
    pool.add(1, (4, 5), WINDOW, 1)
    pool.add(1, (2, 3), SEQUENCE, 2)  # again: now the most recent, with its new origin
    pool.add(1, (6, 7), WINDOW, 3)  # the least recent, (4, 5), goes
    assert pool.get(1) == [((2, 3), SEQUENCE, 2), ((6, 7), WINDOW, 3)] and pool.get(9) == [] and len(pool) == 2


@pytest.mark.parametrize("w, n, g, pool", SETTINGS)
def test_greedy_lookahead_output_equals_target_generate(tiny_pair, loop_pair, w, n, g, pool):
    accepted = 0
    for pair, prompts, lengths in ((tiny_pair, PROMPTS + [REPEAT], [1, 2, 7, 30]), (loop_pair, PROMPTS[:2], [40])):
        for i, prompt in enumerate(prompts):
            ids = encode_prompt(pair.tokenizer, prompt)
            max_new = lengths[i % len(lengths)]  # 1 and 2 leave less budget than N - 1
            dec, rounds = decode(pair, make_drafter(lookahead(w, n, g, pool), pair), ids, max_new_tokens=max_new)
            assert dec.new_tokens == target_greedy(pair.target, ids, max_new, pair.eos), (prompt, w, n, g, pool)
            accepted += sum(r.accepted for r in rounds)
            assert all(r.k <= g * (n - 1) and r.accepted <= n - 1 for r in rounds)
    assert accepted > 10


def test_lookahead_caches_hold_exactly_the_kept_sequence(loop_pair):
    """A kept path always moves in the cache: the window's entries sit between the sequence and the nodes."""
    ids = encode_prompt(loop_pair.tokenizer, PROMPTS[1])
    for temperature in (0.0, 0.3):  # sampling at 0.3: the random bigram target's text still repeats
        dec = SpeculativeDecoder(
            loop_pair.target,
            LookaheadDrafter(loop_pair.target, 4, 3, 4, True),
            ids,
            DecodeConfig(max_new_tokens=40, temperature=temperature, seed=3),
            set(),
        )
        gathered = 0
        for record in dec:
            gathered += record.accepted >= 1
            assert dec.cache.get_seq_length() == dec.cached == dec.ids.shape[1] - 1  # no window token stays
            with torch.inference_mode():
                fresh = dec.target(input_ids=dec.ids).logits[0, dec.cached :]
                incremental = dec.target(
                    input_ids=dec.ids[:, dec.cached :], cache=copy.deepcopy(dec.cache), use_cache=True
                ).logits[0]
            torch.testing.assert_close(incremental, fresh, atol=1e-4, rtol=1e-4)
        assert gathered >= 2, temperature


def two_tokens(pair, runs: int, **decode_values) -> tuple[float, int, list]:
    """The chi-square of the first two tokens of `runs` lookahead runs on the branching prompt (its last token
    has two continuations in the prompt pool: both tried in turn at the first round)."""
    ids = branching_prompt(pair)
    first = []
    stat, df = two_token_test(
        pair,
        lambda: LookaheadDrafter(pair.target, 3, 3, 4, prompt_pool=True),
        ids,
        runs,
        lambda seed, r: r.round or first.append((r.k, r.accepted, r.token_kind)),
        max_new_tokens=2,
        temperature=1.5,
        top_k=4,
        **decode_values,
    )
    return stat, df, first


def test_lookahead_sampling_follows_the_target_distribution(loop_pair):
    stat, df, first = two_tokens(loop_pair, 800)
    kept = sum(a for _, a, _ in first)
    print(f"lookahead: chi-square {stat:.1f} (df {df}, critical {CHI2_999[df]}); first-round drafts kept {kept} of 800")
    assert stat < CHI2_999[df], (stat, df)
    assert {k for k, _, _ in first} == {2} and 20 < kept < 780  # two candidates at the root; kept and refused


@pytest.mark.parametrize("broken", [dict(renormalise=False), dict(residual=False)])
def test_a_broken_rule_is_caught_by_the_same_test(loop_pair, monkeypatch, broken):
    monkeypatch.setattr(acceptance, "select_candidate", lambda *a: broken_select(*a, **broken))
    stat, df, _ = two_tokens(loop_pair, 800)
    print(f"lookahead with a broken rule {broken}: chi-square {stat:.1f} (df {df}, critical {CHI2_999[df]})")
    assert stat > CHI2_999[df], (stat, df)


def looping_prompt(pair) -> torch.Tensor:
    """A prompt that already holds the looping target's cycle: the window's first guesses, picked from the
    prompt, start on it, and their Jacobi trajectories are the cycle's n-grams. (The bigram target ignores the
    sequence, so a window seeded off the cycle would never reach it: the sequence enters a window only through
    attention, as in lade.)"""
    ids = encode_prompt(pair.tokenizer, PROMPTS[1])
    return torch.cat([ids, torch.tensor([target_greedy(pair.target, ids, 7, set())])], 1)


def test_lookahead_records_say_where_each_token_came_from(loop_pair):
    ids = looping_prompt(loop_pair)
    w, n, g = 4, 4, 3
    dec, rounds = decode(loop_pair, LookaheadDrafter(loop_pair.target, w, n, g), ids, max_new_tokens=40)
    kept_from_window = [s for r in rounds if r.extras is not None for s in r.extras.source[: r.accepted]]
    assert len(kept_from_window) > 10 and set(kept_from_window) == {WINDOW}  # the pool's n-grams: the window's
    for r in rounds[:-1]:
        x = r.extras
        full = r.round >= n - 2  # the first N - 2 rounds fill the window's levels
        assert len(x.window) == (n - 1 if full else r.round + 1)
        assert x.ngrams == (w if full else 0)
        assert x.width == sum(map(len, x.window)) + r.k and (not full or x.width - r.k == (w - 1) + (n - 2) * w)
        assert len(x.source) == len(x.collected) == r.k and set(x.source) <= {WINDOW}
        assert all(0 <= c < r.round for c in x.collected)  # collected in an earlier round's window
        assert r.p == [1.0] * r.k and (r.is_tree or r.k == 0)
    last = [r for r in rounds if r.extras is not None][-1]  # a round at the token limit may be a plain step
    assert sum(r.accepted for r in rounds) > 10 and last.extras.pool > 0
    pooled = [
        r
        for r in decode(
            loop_pair,
            LookaheadDrafter(loop_pair.target, w, n, g, prompt_pool=True),
            encode_prompt(loop_pair.tokenizer, REPEAT),
            max_new_tokens=20,
        )[1]
        if r.k
    ]
    assert SEQUENCE in {s for r in pooled for s in r.extras.source}  # the prompt's n-grams, with the pool on
    row = last.as_dict()
    assert {"lookahead_window", "tree_parents"} <= set(row) and "suffix_match" not in row


def test_lookahead_is_built_by_the_registry_and_refuses_what_it_cannot_run(tiny_pair, tiny_spec):
    drafter = make_drafter(lookahead(7, 4, 5, True), tiny_pair)
    assert (drafter.W, drafter.N, drafter.G, drafter.prompt_pool) == (7, 4, 5, True) and drafter.depth(1) == 3
    with pytest.raises(PlaygroundError, match="drafts a chain only"):
        tiny_spec("x", lookahead(), tree="2-2")
    sliding = copy.copy(tiny_pair.target)
    sliding.config = copy.deepcopy(tiny_pair.target.config)
    sliding.config.layer_types = ["sliding_attention", "full_attention"]
    with pytest.raises(PlaygroundError, match="not full attention"):
        LookaheadDrafter(sliding)
    assert parse_tree("2-2") is not None
