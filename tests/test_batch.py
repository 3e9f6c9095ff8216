"""The batched engine (playground/engine/batch.py) on the tiny fp32 pair: every sequence of a batch gets exactly its own
solo greedy output (transformers' generate, one prompt at a time), whatever the other rows accept; prompts of
different lengths, so that left padding and per-row holes both happen."""

from __future__ import annotations

import pytest
import torch

from playground.engine import batch
from playground import engine
from playground.engine.batch import BatchedDecoder, decode_batch
from playground.core.errors import PlaygroundError
from playground.run.runner import encode_prompt

PROMPTS = [
    "Once upon a time",
    "def fibonacci(n):\n    if n < 2:",
    "Q",
    "The quick brown fox jumps over the lazy dog and",
]
N = 24


@pytest.fixture(scope="module")
def prompt_ids(tiny_pair):
    ids = [encode_prompt(tiny_pair.tokenizer, p, chat=False)[0].tolist() for p in PROMPTS]
    assert len({len(i) for i in ids}) == len(ids)  # all lengths differ: the left padding differs per row
    return ids


def solo_generate(pair, ids: list[int], max_new_tokens: int = N, eos: set[int] | None = None) -> list[int]:
    """One prompt alone through transformers' own greedy generate: the reference."""
    eos = sorted(eos if eos is not None else pair.eos)
    out = pair.target.generate(
        torch.tensor([ids]), max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=eos[0]
    )
    return out[0, len(ids) :].tolist()


@pytest.fixture(scope="module")
def solo(tiny_pair, prompt_ids):
    return [solo_generate(tiny_pair, ids) for ids in prompt_ids]


@pytest.mark.parametrize("k", [0, 1, 3, 5])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_each_sequence_greedy_output_equals_its_solo_target_alone_output(tiny_pair, prompt_ids, solo, size, k):
    result = decode_batch(tiny_pair.target, tiny_pair.draft, prompt_ids[:size], k, N, tiny_pair.eos)
    assert result.outputs == solo[:size]
    assert [len(m) for m in result.margins] == [len(o) for o in result.outputs]  # a margin per output token


def test_rows_accept_different_numbers_of_tokens_in_one_round_and_leave_holes(tiny_pair, prompt_ids):
    decoder = BatchedDecoder(tiny_pair.target, tiny_pair.draft, prompt_ids, 4, N, tiny_pair.eos)
    holes = []
    for r in decoder:
        kv = decoder.target_kv
        holes.append(kv.columns * len(decoder.active) - int(kv.real.sum()) if decoder.active else 0)
        if len(set(r.accepted)) > 1:
            break
    assert len(set(r.accepted)) > 1, "no round where rows accepted different numbers: the rule was never exercised"
    assert decoder.target_kv.real.sum(1).tolist() == decoder.target_kv.length.tolist()  # positions = real tokens
    assert holes[-1] > 0  # padding and rejected columns are in the cache, masked


def test_a_mask_that_shows_rows_their_holes_breaks_equality(tiny_pair, prompt_ids, solo, monkeypatch):
    """The comparison can fail: with a mask that lets a query see every earlier column of the block (padding and
    rejected drafts included), batched outputs no longer equal the solo ones."""

    def careless(self, real_new):
        everything = torch.ones_like(self.real)
        saved, self.real = self.real, everything
        try:
            return right(self, real_new)
        finally:
            self.real = saved

    right = batch.PaddedCache.mask
    monkeypatch.setattr(batch.PaddedCache, "mask", careless)
    result = decode_batch(tiny_pair.target, tiny_pair.draft, prompt_ids, 3, N, tiny_pair.eos)
    assert result.outputs != solo


def test_the_target_alone_batch_adds_one_token_per_row_and_round(tiny_pair, prompt_ids, solo):
    result = decode_batch(tiny_pair.target, None, prompt_ids, 0, N, tiny_pair.eos)
    assert result.outputs == solo
    assert all(r.k == 0 and all(len(t) == 1 for t in r.new_tokens) for r in result.rounds)
    assert len(result.rounds) == max(len(o) for o in solo)


def test_a_row_that_ends_early_leaves_the_batch_and_the_others_are_unchanged(tiny_pair, prompt_ids, solo):
    stop = solo[0][3]  # row 0's fourth token becomes an end-of-text token
    eos = tiny_pair.eos | {stop}
    expected = [solo_generate(tiny_pair, ids, eos=eos) for ids in prompt_ids]
    assert len(expected[0]) == 4 < N
    decoder = BatchedDecoder(tiny_pair.target, tiny_pair.draft, prompt_ids, 3, N, eos)
    result = decoder.run()
    assert result.outputs == expected
    assert any(0 not in r.rows for r in result.rounds)  # row 0 left; the rounds after it ran without it


def test_the_budget_is_per_sequence_and_never_exceeded(tiny_pair, prompt_ids, solo):
    result = decode_batch(tiny_pair.target, tiny_pair.draft, prompt_ids, 5, 7, tiny_pair.eos)
    assert result.outputs == [s[:7] for s in solo]


def test_bad_batches_are_refused(tiny_pair, prompt_ids):
    with pytest.raises(PlaygroundError, match="no prompt may be empty"):
        BatchedDecoder(tiny_pair.target, tiny_pair.draft, [prompt_ids[0], []], 2, 4, tiny_pair.eos)
    with pytest.raises(PlaygroundError, match="with a draft model"):
        BatchedDecoder(tiny_pair.target, None, prompt_ids, 2, 4, tiny_pair.eos)


def test_a_batch_runs_through_the_engines_one_loop(tiny_pair, prompt_ids, monkeypatch):
    """The batch's rounds are planned, timed and cut by engine.Loop: the engine's clock (made to tick one second a
    read here) times both halves of every round."""
    ticks = iter(range(10_000))
    monkeypatch.setattr(engine, "clock", lambda device: float(next(ticks)))
    result = decode_batch(tiny_pair.target, tiny_pair.draft, prompt_ids, 3, 6, tiny_pair.eos)
    assert result.rounds and all(r.draft_s == 1.0 and r.verify_s == 1.0 for r in result.rounds)
