"""Adding a strategy: the whole of a small one, "repeat the last n-gram", is this file, as a built-in's is one module
of playground/decoding/strategies/: its Options (defaults, checks, label), its build and its registry entry. It
registers itself with the registry and runs through the spec, the runner's session and the engine as the built-ins
do; nothing else in playground/ names it. Its draft is deterministic (p one-hot), so greedy output is the target alone's."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import pytest
import torch

from playground import decoding
from playground.core.config import DecodeConfig, SamplingParams, KPolicy
from playground.decoding.chain import ChainDraft
from playground.decoding.options import typed, whole
from playground.core.draft import Draft, Drafter
from playground.core.errors import PlaygroundError
from playground.run.runner import new_tokens
from playground.run.spec import DrafterSpec, RunSpec
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
        return ChainDraft(
            torch.tensor([last[i % len(last)] for i in range(k)], dtype=torch.long, device=ids.device), None
        )


@dataclass(frozen=True)
class Options:
    n: int = 2  # the last n tokens repeat

    def __post_init__(self) -> None:
        typed(self, n=whole(self.n, 1, 8, "repeat the last n-gram: n"))

    @property
    def label(self) -> str:
        return f"n = {self.n}" if self.n != 2 else ""


STRATEGY = decoding.Strategy(
    Kind.REPEAT_NGRAM, lambda options, pair, run: RepeatNgram(options.n), pickable=False, options=Options
)


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
        DecodeConfig(max_new_tokens=24, k=3, policy=KPolicy.FIXED, temperature=temperature),
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


def test_a_registered_strategy_has_its_own_options(registered):
    spec = DrafterSpec.of(Kind.REPEAT_NGRAM.value, n=3)
    assert spec.options == Options(3) and spec.label == "repeat the last n-gram (n = 3)"
    assert spec.but(n=2).label == "repeat the last n-gram"
    with pytest.raises(PlaygroundError, match="repeat the last n-gram: n must be a whole number from 1 to 8"):
        DrafterSpec.of(Kind.REPEAT_NGRAM.value, n=0)
    with pytest.raises(PlaygroundError, match="'precision' is not an option of the 'repeat the last n-gram'"):
        DrafterSpec.of(Kind.REPEAT_NGRAM.value, precision="int8")
