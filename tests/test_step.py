"""The lean forward (playground/kernels/step.py): one C call per pass computes what HF's wrapper around the fused
layers computes, bitwise, on every kernel variant; the drafter uses it for chains and hands its cache to HF's path
where a staged draft needs it; the engine verifies chains and token trees with it (the target's cache: a tree's
mask and rotary positions in the same one call, `LeanForward.tree`), and a tree's draft expands on it too."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import DynamicCache

from playground.models import tiny
from playground.core.config import DecodeConfig, SamplingParams
from playground.engine.cache import crop_cache
from playground.decoding.model import ModelDrafter
from playground.decoding.tree import TreeDrafter, draft_tree, keep_path, score_tree
from playground.engine import SpeculativeDecoder
from playground.kernels import model as kernel_model
from playground.kernels.step import LeanForward, why_not
from playground.core.draft import Tree
from playground.core.treeshape import parse_tree
from playground.decoding.lookup import NoDrafter
from tests.helpers import target_greedy
from tests.kernel_support import kernel_variant, require_kernels  # noqa: F401 (a fixture)

require_kernels()
pytestmark = pytest.mark.usefixtures("kernel_variant")


def _qwen2() -> torch.nn.Module:
    """A tiny random Qwen2 (q/k/v biases, a tied head), the default draft's family."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(5)
    config = Qwen2Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        initializer_range=0.3,
    )
    return Qwen2ForCausalLM(config)


@pytest.fixture(
    scope="module", params=["llama-int8", "llama-bf16", "qwen2-int8", "qwen2-bf16", "llama-int4", "qwen2-int4"]
)
def draft(request, tmp_path_factory):
    """A tiny Llama (untied head) or Qwen2 (biases, tied head), in int8, int4 or on the bf16 kernels."""
    family, precision = request.param.split("-")
    if family == "llama":
        model = tiny.build_model(tmp_path_factory.mktemp("lean"), vocab_size=300, eos=1, seed=7, layers=3, save=False)
    else:
        model = _qwen2()
    model = model.to(torch.bfloat16).eval()
    if precision == "int8":
        kernel_model.quantize_int8(model)
    elif precision == "int4":
        kernel_model.quantize_int4(model, group_size=32)
    else:
        assert kernel_model.make_invariant(model)
    return model


def _hf(model, cache, feed, logits=True) -> torch.Tensor:
    if logits:
        return model(input_ids=feed, cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1]
    return model.model(input_ids=feed, cache=cache, use_cache=True).last_hidden_state[0, -1]


@torch.inference_mode()
def test_the_lean_forward_is_hfs_forward_bitwise_through_steps_crops_and_growth(draft):
    """A prompt, single-token steps, multi-token passes, crops back (as after rejections) and the buffers'
    growth past their capacity: every pass's logits and hidden state equal HF's, bit for bit."""
    assert why_not(draft) is None
    lean, cache = LeanForward(draft, capacity=8), DynamicCache()
    g = torch.Generator().manual_seed(0)
    feeds = [torch.randint(0, 300, (1, n), generator=g) for n in (7, 1, 1, 1, 3, 1, 1, 5, 1, 1, 1, 1, 9, 1)]
    for i, feed in enumerate(feeds):
        ours, theirs = lean(feed, logits=i % 3 != 2), _hf(draft, cache, feed, logits=i % 3 != 2)
        assert ours.dtype == theirs.dtype and torch.equal(ours, theirs), i
        assert lean.length == cache.get_seq_length()
        if i % 4 == 3:  # a rejection: back two positions
            lean.crop(lean.length - 2)
            crop_cache(cache, cache.get_seq_length() - 2)
    assert lean.capacity > 8


@torch.inference_mode()
def test_a_pass_keeps_the_last_positions_logits_as_hfs_logits_to_keep(draft):
    """keep=n: the last n fed positions' logits (a chain's verification scores every draft token), bitwise HF's
    logits_to_keep=n, on top of a cache the earlier passes filled."""
    lean, cache = LeanForward(draft), DynamicCache()
    g = torch.Generator().manual_seed(1)
    for fed, keep in ((9, 1), (5, 5), (1, 1), (6, 3), (9, 9)):
        feed = torch.randint(0, 300, (1, fed), generator=g)
        ours = lean(feed, keep=keep)
        theirs = draft(input_ids=feed, cache=cache, use_cache=True, logits_to_keep=keep).logits[0]
        assert ours.shape == theirs.shape == (keep, 300) and torch.equal(ours, theirs), (fed, keep)
    with pytest.raises(ValueError, match="keeps 1 to 2"):
        lean(feed[:, :2], keep=3)
    assert lean.length == cache.get_seq_length() == 30  # a refused pass holds nothing more


@torch.inference_mode()
def test_the_engine_verifies_chains_and_trees_on_the_lean_cache(draft):
    """The target on the kernels: a chain's rounds go through the lean forward's cache, and the output is HF
    generate's, bitwise; a tree drafter's rounds too, the cache a lean one to the end (no hand-over to HF's path)."""
    target = draft
    drafter = _qwen2().eval()  # fp32, on HF's path: it proposes, some tokens kept and some rejected
    ids = torch.arange(10, 22)[None]
    reference = target_greedy(target, ids, 24, set())
    config = DecodeConfig(k=4, max_new_tokens=24, temperature=0.0)
    chain = SpeculativeDecoder(target, ModelDrafter(drafter), ids, config, set())
    assert isinstance(chain.cache, LeanForward)
    rounds = list(chain)
    assert chain.new_tokens == reference and isinstance(chain.cache, LeanForward)
    assert chain.cache.get_seq_length() == chain.cached == chain.ids.shape[1] - 1
    assert any(r.accepted < r.k for r in rounds)  # rejections cropped the lean cache
    tree = SpeculativeDecoder(target, TreeDrafter(ModelDrafter(drafter), parse_tree("2-1"), target), ids, config, set())
    list(tree)
    assert tree.new_tokens == reference and isinstance(tree.cache, LeanForward)
    assert tree.cache.get_seq_length() == tree.cached == tree.ids.shape[1] - 1
    kept = DynamicCache(config=target.config)  # a kept prefix (prefixes.py): HF's cache of the prompt but its last
    target(input_ids=ids[:, :-1], cache=kept, use_cache=True, logits_to_keep=1)
    started = SpeculativeDecoder(target, ModelDrafter(drafter), ids, config, set())
    started.start_from(kept)
    assert list(started)[0].prefill == 0 and started.new_tokens == reference


def test_the_session_budget_counts_a_lean_cache_but_not_its_models_weights(draft):
    """A step-through decoder keeps its target's lean cache: the session pays for its buffers, not for the shared
    head and weights it reaches (counted before issue 44's fix: the 1.5B target's 467 MB)."""
    decoder = SpeculativeDecoder(draft, NoDrafter(), torch.arange(10, 22)[None], DecodeConfig(max_new_tokens=8), set())
    lean = decoder.cache
    assert isinstance(lean, LeanForward) and lean._head.nbytes() > 10_000
    own = lean.nbytes() + lean.cos.nbytes + lean.sin.nbytes
    assert own <= decoder.nbytes() <= own + 20_000


@torch.inference_mode()
def test_the_handed_over_cache_goes_on_as_hfs_own(draft):
    lean, cache = LeanForward(draft), DynamicCache()
    prompt = torch.arange(3, 15)[None]
    lean(prompt)
    _hf(draft, cache, prompt)
    handed = lean.to_dynamic()
    step = torch.tensor([[42]])
    assert torch.equal(_hf(draft, handed, step), _hf(draft, cache, step))


@torch.inference_mode()
def test_a_chain_drafter_proposes_the_same_on_the_lean_forward_as_on_hfs_path(draft):
    """The same draft model and prompt, rounds of proposals and partial acceptances: the lean drafter's tokens and
    logits equal those of a drafter kept on HF's path, bitwise."""
    lean = ModelDrafter(draft, confidence=0.3)
    slow = copy.copy(lean)
    slow.lean = False
    slow.reset()
    assert lean._lean is not None and slow._lean is None
    ids = torch.arange(5, 25)[None]
    greedy = SamplingParams(temperature=0.0)
    for accepted in (2, 0, 4, 1, 3):
        a, b = lean.propose(ids, 4, greedy, None), slow.propose(ids, 4, greedy, None)
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.logits, b.logits)
        lean.observe(accepted)
        slow.observe(accepted)
        ids = torch.cat([ids, a.tokens[:accepted].view(1, -1), torch.tensor([[accepted + 7]])], 1)
    # a tree or a staged draft asks for the cache: the lean drafter goes on along HF's path, with the same cache
    assert lean.cache.get_seq_length() == slow.cache.get_seq_length() and lean._lean is None
    a, b = lean.propose(ids, 3, greedy, None), slow.propose(ids, 3, greedy, None)
    assert torch.equal(a.logits, b.logits)
    lean.reset()
    assert lean._lean is not None  # back on the lean forward for the next run


def test_models_the_lean_forward_does_not_compute_keep_hfs_path(tiny_pair):
    assert why_not(tiny_pair.draft)  # fp32: not on the fused kernels
    drafter = ModelDrafter(tiny_pair.draft)
    assert drafter._lean is None and isinstance(drafter.cache, DynamicCache)


def _a_tree(ids_len: int) -> Tree:
    """Seven nodes over three depths, siblings and a deep branch: parents before children."""
    parents = [-1, -1, 0, 0, 1, 2, 5]
    depths = [1, 1, 2, 2, 2, 3, 4]
    tokens = [(ids_len * 7 + 3 * i) % 300 for i in range(len(parents))]
    return Tree(tokens, parents, depths, torch.zeros(len(parents) + 1, 300), 0)


@torch.inference_mode()
def test_a_tree_pass_on_the_lean_forward_is_hfs_tree_pass_bitwise_and_keeps_the_path(draft):
    """A tree's verification (its mask, each node at its depth's rotary position) in one C call gives HF's logits for
    the same tree bit for bit; the accepted path moved into place and the rest cropped, the next passes (a tree,
    then a step) still equal HF's on its gathered cache."""
    lean, cache = LeanForward(draft, capacity=16), DynamicCache()
    ids = torch.arange(3, 14)[None]
    lean(ids[:, :-3])
    _hf(draft, cache, ids[:, :-3])
    cached = ids.shape[1] - 3
    for path in ([0, 2], [1, 4], [], [0, 2, 5, 6]):
        tree = _a_tree(ids.shape[1])
        ours, theirs = score_tree(draft, lean, ids, cached, tree), score_tree(draft, cache, ids, cached, tree)
        assert ours.shape == theirs.shape == (len(tree) + 1, 300) and torch.equal(ours, theirs), path
        start = ids.shape[1]
        keep_path(lean, start, [start + i for i in path])
        keep_path(cache, start, [start + i for i in path])
        assert lean.length == cache.get_seq_length() == start + len(path)
        ids = torch.cat([ids, torch.tensor([[tree.tokens[i] for i in path] + [17]])], 1)
        cached = ids.shape[1] - 1
    step = ids[:, -1:]
    assert torch.equal(lean(step), _hf(draft, cache, step)) and lean.capacity > 16  # grown past 16


@torch.inference_mode()
def test_a_tree_draft_expands_on_the_lean_forward_as_on_hfs_path(draft):
    """The draft expands a tree depth by depth on its lean forward (one call a depth): the same nodes and the same
    p rows, bitwise, as a drafter kept on HF's path, over rounds that keep some of each tree."""
    lean = ModelDrafter(draft)
    slow = copy.copy(lean)
    slow.lean = False
    slow.reset()
    ids = torch.arange(5, 25)[None]
    greedy = SamplingParams(temperature=0.0)
    for shape in ("3-2-1", "dynamic:9", "2-2-2"):
        a = draft_tree(lean, ids, parse_tree(shape), 4, greedy, None)
        b = draft_tree(slow, ids, parse_tree(shape), 4, greedy, None)
        assert a.tokens == b.tokens and a.parents == b.parents and torch.equal(a.p_rows, b.p_rows), shape
        assert lean.lean_forward is not None and lean.lean_forward.length == slow.cache.get_seq_length()
        path = [0, *a.children[1][:1]]
        fed = [ids.shape[1] + i for i in path if i < a.fed]
        keep_path(lean.lean_forward, ids.shape[1], fed)
        keep_path(slow.cache, ids.shape[1], fed)
        lean.cached = slow.cached = ids.shape[1] + len(fed)
        ids = torch.cat([ids, torch.tensor([[a.tokens[i] for i in path] + [9]])], 1)
