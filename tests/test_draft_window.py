"""The draft's prompt window (decoding/model.py's WINDOW): a draft model reads a long prompt's first and last tokens
only, as one context of its own; the target's output is unchanged (chains, trees, staged drafts, HF's path and the
lean forward), and the draft's cache holds exactly that context."""

from __future__ import annotations

import copy

import pytest
import torch

from playground.core.config import DecodeConfig, SamplingParams
from playground.core.treeshape import parse_tree
from playground.decoding import model as draft_model
from playground.decoding.model import ModelDrafter, skipped_span
from playground.decoding.staged import StagedDrafter
from playground.decoding.tree import TreeDrafter
from playground.engine import SpeculativeDecoder
from playground.kernels import model as kernel_model
from playground.models import tiny
from tests.helpers import decode, target_greedy
from tests.kernel_support import require_kernels

HEAD, TAIL = 3, 5
GREEDY = SamplingParams(temperature=0.0)


def _long_prompt(n: int = 40, seed: int = 0) -> torch.Tensor:
    return torch.randint(2, 300, (1, n), generator=torch.Generator().manual_seed(seed))


def _context(ids: torch.Tensor) -> torch.Tensor:
    """What the window keeps of ids, built here by hand."""
    return torch.cat([ids[:, :HEAD], ids[:, -TAIL:]], dim=1)


@pytest.fixture
def small_window():
    with draft_model.window((HEAD, TAIL)):
        yield


def test_the_skipped_span_is_the_middle_of_a_long_prompt_and_nothing_of_a_short_one():
    assert skipped_span(8, (3, 5)) == (0, 0)
    assert skipped_span(9, (3, 5)) == (3, 1)
    assert skipped_span(2000, (64, 448)) == (64, 2000 - 512)
    assert skipped_span(2000, None) == (0, 0)


def _propose_twice(drafter: ModelDrafter, ids: torch.Tensor) -> list[list[int]]:
    """Two rounds' drafts: the second after the first draft's first two tokens were kept."""
    first = drafter.propose(ids, 4, GREEDY, None).tokens
    drafter.observe(2)
    ids = torch.cat([ids, first[:2].view(1, -1), torch.tensor([[7]])], dim=1)
    return [first.tolist(), drafter.propose(ids, 4, GREEDY, None).tokens.tolist()]


@pytest.mark.usefixtures("small_window")
def test_a_windowed_draft_is_the_draft_of_the_prompts_head_and_tail(tiny_pair):
    """On HF's path: a drafter given the whole long prompt drafts what a whole-prompt drafter drafts from the head and
    tail alone, round after round, and its cache holds that context, not the prompt."""
    ids = _long_prompt()
    windowed = ModelDrafter(tiny_pair.draft)
    drafts = _propose_twice(windowed, ids)
    assert windowed.skipped == ids.shape[1] - HEAD - TAIL
    assert windowed.cache.get_seq_length() == windowed.cached < ids.shape[1]
    with draft_model.window(None):
        whole_of_context = ModelDrafter(tiny_pair.draft)
        assert _propose_twice(whole_of_context, _context(ids)) == drafts
        whole = ModelDrafter(tiny_pair.draft)
        assert _propose_twice(whole, ids) != drafts  # the skipped tokens mattered to this random draft


@pytest.mark.parametrize(
    "make",
    [
        lambda pair: ModelDrafter(pair.draft, confidence=0.3),
        lambda pair: StagedDrafter(pair.draft),
        lambda pair: TreeDrafter(ModelDrafter(pair.draft), parse_tree("confidence:12"), pair.target),
        lambda pair: TreeDrafter(ModelDrafter(pair.draft), parse_tree("3-2-1"), pair.target),
    ],
    ids=["chain", "staged", "confidence-tree", "tree"],
)
@pytest.mark.usefixtures("small_window")
def test_greedy_output_with_a_windowed_draft_equals_the_target_alone(tiny_pair, make):
    for seed in range(3):
        ids = _long_prompt(30 + 7 * seed, seed)
        dec, rounds = decode(tiny_pair, make(tiny_pair), ids, eos=set(), max_new_tokens=24)
        assert dec.new_tokens == target_greedy(tiny_pair.target, ids, 24, set())
        assert sum(len(r.draft_tokens) for r in rounds) > 0


@pytest.mark.usefixtures("small_window")
def test_a_windowed_trees_draft_cache_holds_its_context_and_the_accepted_path(tiny_pair):
    """After every round the tree's draft cache equals a fresh pass over the context (head, tail and every kept
    token), position for position."""
    ids = _long_prompt(33, 4)
    drafter = TreeDrafter(ModelDrafter(tiny_pair.draft), parse_tree("3-2-1"), tiny_pair.target)
    dec = SpeculativeDecoder(tiny_pair.target, drafter, ids, DecodeConfig(max_new_tokens=20, tree="3-2-1"), set())
    for _ in dec:
        inner = drafter.drafter
        context = torch.cat([_context(ids), dec.ids[:, ids.shape[1] :]], dim=1)
        cached = inner.cached
        assert inner.cache.get_seq_length() == cached <= context.shape[1]
        with torch.inference_mode():
            fresh = inner.model(input_ids=context).logits[0, cached:]
            on_cache = inner.model(input_ids=context[:, cached:], cache=copy.deepcopy(inner.cache), use_cache=True)
        torch.testing.assert_close(on_cache.logits[0], fresh, atol=1e-4, rtol=1e-4)


@pytest.mark.usefixtures("small_window")
def test_on_the_lean_forward_a_windowed_draft_is_the_draft_of_its_context():
    """The same on the kernels' lean forward (an int4 draft, as the default's): bit for bit the context's drafts."""
    require_kernels()
    model = tiny.build_model(None, vocab_size=300, eos=1, seed=5, layers=4, hidden=64, save=False)
    model = model.to(torch.bfloat16).eval()
    kernel_model.quantize_int4(model)
    ids = _long_prompt(50, 9)
    windowed = ModelDrafter(model)
    assert windowed.lean_forward is not None
    drafts = _propose_twice(windowed, ids)
    context_then = HEAD + TAIL + 3  # the second round's context: the window and the three tokens added to ids
    assert windowed.lean_forward.length == windowed.cached == context_then + 4 - 1  # all four drafts but the last
    with draft_model.window(None):
        assert _propose_twice(ModelDrafter(model), _context(ids)) == drafts
