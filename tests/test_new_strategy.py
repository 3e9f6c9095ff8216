"""Adding a strategy: the whole of a small one, "repeat the last n-gram", is this file. It registers itself with
the registry and runs through the spec, the runner's session and the engine as the built-ins do; nothing else in
playground/ names it. Its draft is deterministic (p one-hot), so greedy output is the target alone's."""

from __future__ import annotations

from enum import Enum

import pytest
import torch

from playground import decoding
from playground.config import DecodeConfig, SamplingParams
from playground.decoding.base import Draft, Drafter
from playground.errors import PlaygroundError
from playground.runner import new_tokens
from playground.spec import DrafterSpec, RunSpec
from tests.helpers import REPEAT, run_all


class Kind(str, Enum):
    REPEAT_NGRAM = "repeat the last n-gram"


class RepeatNgram(Drafter):
    """Drafts the sequence's last n tokens again, as many times as k asks."""

    name = Kind.REPEAT_NGRAM.value

    def __init__(self, n: int = 2) -> None:
        self.n = n

    def propose(self, ids: torch.Tensor, k: int, params: SamplingParams, generator: torch.Generator | None) -> Draft:
        last = ids[0, -self.n :].tolist()
        return Draft(torch.tensor([last[i % len(last)] for i in range(k)], dtype=torch.long, device=ids.device), None)


STRATEGY = decoding.Strategy(Kind.REPEAT_NGRAM, lambda build: RepeatNgram(), pickable=False)


@pytest.fixture
def registered():
    decoding.register(STRATEGY)
    yield
    decoding.unregister(Kind.REPEAT_NGRAM)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_a_registered_strategy_runs_through_the_runner_and_the_engine(registered, runner, tiny_spec, temperature):
    pair = tiny_spec().pair
    spec = RunSpec(
        pair,
        DrafterSpec(Kind.REPEAT_NGRAM.value),
        DecodeConfig(max_new_tokens=24, k=3, temperature=temperature),
        REPEAT,
    )
    assert spec.drafter.kind is Kind.REPEAT_NGRAM and spec.drafter.label == "repeat the last n-gram"
    rounds = run_all(runner, spec)
    assert sum(len(r.new_tokens) for r in rounds) == 24 and rounds[0].k == 3 and all(r.k <= 3 for r in rounds)
    assert all(r.p == [1.0] * r.k for r in rounds)  # deterministic: p one-hot on each draft token
    if temperature == 0:
        assert new_tokens(rounds) == new_tokens(run_all(runner, spec.baseline()))  # lossless: the target's own


def test_a_strategy_is_known_only_while_registered(registered):
    decoding.unregister(Kind.REPEAT_NGRAM)
    with pytest.raises(PlaygroundError, match="Unknown drafter 'repeat the last n-gram'"):
        DrafterSpec(Kind.REPEAT_NGRAM.value)
    decoding.register(STRATEGY)
    with pytest.raises(PlaygroundError, match="registered already"):
        decoding.register(STRATEGY)
