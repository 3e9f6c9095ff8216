"""The budget's count of what a session keeps between requests, against what dropping it really frees (issue 55):
within 10 %, for a step-through run of each drafter kind (its KV caches, its rounds, its drafter's tables), the Run
tab's latest run, and the n-gram and suffix indexes of a drafter over a 20,000-token sequence.

The real size is measured independently of the code under test: tracemalloc runs while the thing is made, and the
real size is what Python frees when the thing is dropped, plus the tensor storages it reaches (one walk, done here,
past the shared models and tokenizers; tracemalloc does not see torch's buffers). What stays after the drop (the
kernels' memos, the runner's warm-up, transformers' caches) is nobody's session and is not counted."""

from __future__ import annotations

import ctypes
import gc
import tracemalloc
from typing import Any, Callable

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from playground.core.config import SamplingParams
from playground.decoding.lookahead import LookaheadDrafter
from playground.decoding.suffix import SuffixDrafter
from playground.kernels.ops import Proj
from playground.models import LoadedPair
from playground.ui import budget, run_tab, step_tab
from playground.ui.state import RUN, STEP, SessionState
from test_sizes import text_like, uniform
from ui_support import PROMPT, controls

TOLERANCE = 0.10


def held_tensors(*roots: object) -> int:
    """Bytes of the distinct tensor storages the roots reach, past the shared models, tokenizers and pairs."""
    skip = (torch.nn.Module, PreTrainedTokenizerBase, LoadedPair, type, ctypes.Structure, ctypes.Array, Proj)
    seen, storages, stack, total = set(), set(), list(roots), 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip) or obj is None:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            total += storage.nbytes() * (storage.data_ptr() not in storages)
            storages.add(storage.data_ptr())
        elif isinstance(obj, dict):
            stack.extend([*obj.keys(), *obj.values()])
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif not isinstance(obj, (str, bytes, int, float, complex)) and hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
    return total


def _fill_freelists() -> None:
    """CPython keeps up to 2,000 freed tuples of each short length (and some floats) for reuse without freeing
    them: filled first, the dropped thing's own are really freed, where tracemalloc sees them."""
    junk = [tuple(range(n)) for n in range(1, 20) for _ in range(2_100)] + [i + 0.5 for i in range(200)]
    del junk


def real_and_counted(make: Callable[[], Any], counted: Callable[[Any], int], part: Callable[[Any], Any], drop) -> tuple:
    """(the count, the real size) of part(make()): what dropping it (drop(made)) frees, and its tensors."""
    gc.collect()
    tracemalloc.start()
    try:
        made = make()
        count = counted(made)
        _fill_freelists()
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        tensors = held_tensors(part(made))  # after `before`: the walk's own allocations are freed with the thing
        drop(made)
        gc.collect()
        freed = before - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return count, freed + tensors


def _budgets(state: SessionState, what: str) -> int:
    """The budget's count of one thing the session keeps, as the ledger holds it."""
    return next(t.nbytes for t in state.ledger.held(state) if t.what == what)


STEPPED = [
    dict(drafter="draft model"),
    dict(drafter="draft model", tree="2-1"),
    dict(drafter="prompt lookup"),
    dict(drafter="early exit"),
    dict(drafter="suffix decoding"),
    dict(drafter="lookahead decoding"),
    dict(drafter="staged: prompt lookup → draft model"),
]


@pytest.mark.parametrize("settings", STEPPED, ids=lambda d: " ".join(d.values()))
def test_a_step_through_run_counts_within_10_percent_of_what_dropping_it_frees(tiny_catalog, runner, settings):
    def make() -> SessionState:
        state = SessionState(ledger=budget.Ledger(limit_mb=1e6))
        step_tab.step_start(runner, state, controls(prompt=PROMPT * 8, max_new_tokens=64, **settings))
        for _ in range(24):
            step_tab.step_next(state)
        return state

    make()  # the first of a kind warms the runner (its profiles, the kernels' memos): nobody's session
    count, real = real_and_counted(
        make, lambda s: _budgets(s, STEP), lambda s: s.step, lambda s: setattr(s, "step", None)
    )
    assert abs(count / real - 1) < TOLERANCE, (count, real)


def test_the_run_tabs_latest_run_counts_within_10_percent_of_what_dropping_it_frees(tiny_catalog, runner):
    def make() -> SessionState:
        state = SessionState(ledger=budget.Ledger(limit_mb=1e6))
        for _ in run_tab.generate(runner, state, controls(max_new_tokens=96), True):
            pass
        state.downloads.close()  # files, not Python objects: counted by their sizes (test_budget.py)
        assert state.run is not None and state.run.baseline_done
        return state

    make()
    count, real = real_and_counted(make, lambda s: _budgets(s, RUN), lambda s: s.run, lambda s: setattr(s, "run", None))
    assert abs(count / real - 1) < TOLERANCE, (count, real)


LONG = {"text-like": lambda: text_like(20_000), "uniform over 150k": lambda: uniform(150_000, 1)}


def _long_sequence(tokens: list[int]) -> torch.Tensor:
    return torch.tensor([tokens])


@pytest.mark.parametrize("stream", list(LONG))
def test_a_lookahead_pool_over_a_20000_token_prompt_counts_within_10_percent(tiny_pair, stream):
    """The prompt pool (lade's POOL_FROM_PROMPT) holds every n-gram of the prompt: its count grows as it is added."""
    ids = _long_sequence(LONG[stream]())

    def make() -> dict:
        drafter = LookaheadDrafter(tiny_pair.target, prompt_pool=True)
        drafter.propose(ids, 2, SamplingParams(), None)
        return {"drafter": drafter}

    count, real = real_and_counted(make, lambda d: d["drafter"].nbytes(), lambda d: d["drafter"], dict.clear)
    assert count > 1_000_000  # a large pool
    assert abs(count / real - 1) < TOLERANCE, (count, real)


@pytest.mark.parametrize("stream", list(LONG))
def test_a_suffix_drafters_tree_over_a_20000_token_prompt_counts_within_10_percent(stream):
    ids = _long_sequence(LONG[stream]())

    def make() -> dict:
        drafter = SuffixDrafter()
        drafter.propose(ids, 4, SamplingParams(), None)
        return {"drafter": drafter}

    count, real = real_and_counted(make, lambda d: d["drafter"].nbytes(), lambda d: d["drafter"], dict.clear)
    assert count > 10_000_000  # a large tree
    assert abs(count / real - 1) < TOLERANCE, (count, real)
