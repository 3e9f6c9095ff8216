"""Token trees (playground/decoding/tree.py): lossless greedy output, exact sampling law, caches that keep exactly
the accepted path, records the views can draw, on the tiny Llamas and a tiny random Qwen2."""

from __future__ import annotations

import copy

import pytest
import torch

from playground.decoding import make_drafter, tree
from playground.decoding.lookup import PromptLookupDrafter
from playground.decoding.model import ModelDrafter
from playground.decoding.tree import TreeDrafter
from playground.engine import SpeculativeDecoder
from playground.core.errors import PlaygroundError
from playground.run.runner import encode_prompt
from playground.engine import acceptance
from playground.engine.acceptance import residual
from playground.engine.sampling import sample
from playground.core.config import DecodeConfig, DrafterKind
from playground.run.spec import DrafterSpec
from playground.core.treeshape import parse_tree
from tests.helpers import CHI2_999, PROMPTS, decode, fit, random_dists, target_greedy, two_token_test

SHAPES = ["3-2-1-1", "2-2", "1-1-1-1", "4", "dynamic:12", "dynamic:3", "sized:12", "sized:3", "confidence:12"]


def trees(pair, shape: str, drafter=None) -> TreeDrafter:
    """A token tree of this shape from the pair's draft model (or from `drafter`)."""
    return TreeDrafter(drafter or ModelDrafter(pair.draft), parse_tree(shape), pair.target)


@pytest.mark.parametrize("shape", SHAPES)
def test_greedy_tree_output_equals_target_generate(tiny_pair, shape):
    accepted = 0
    for i, prompt in enumerate(PROMPTS[:6]):
        ids = encode_prompt(tiny_pair.tokenizer, prompt)
        max_new = [1, 2, 7, 30][i % 4]  # 1 and 2 leave less budget than the tree's depth
        dec, rounds = decode(tiny_pair, trees(tiny_pair, shape), ids, max_new_tokens=max_new)
        assert dec.new_tokens == target_greedy(tiny_pair.target, ids, max_new, tiny_pair.eos), (prompt, shape)
        accepted += sum(r.accepted for r in rounds)
    assert accepted > 0


def test_greedy_tree_with_the_early_exit_drafter_equals_target_generate(tiny_pair):
    for prompt in PROMPTS[:3]:
        ids = encode_prompt(tiny_pair.tokenizer, prompt)
        drafter = make_drafter(DrafterSpec(DrafterKind.EARLY_EXIT), tiny_pair, tree=parse_tree("2-2-1"))
        dec, _ = decode(tiny_pair, drafter, ids, max_new_tokens=20)
        assert dec.new_tokens == target_greedy(tiny_pair.target, ids, 20, tiny_pair.eos)


def test_a_tree_accepts_at_least_as_much_as_its_main_chain(tiny_pair):
    """Greedy: the tree 3-1-1 holds the chain of the draft's argmaxes (1-1-1) as its first branch, so
    every round keeps at least as many tokens; over a run, more."""
    ids = encode_prompt(tiny_pair.tokenizer, PROMPTS[1])
    _, chain = decode(tiny_pair, trees(tiny_pair, "1-1-1"), ids, max_new_tokens=40)
    _, wide = decode(tiny_pair, trees(tiny_pair, "3-1-1"), ids, max_new_tokens=40)
    per_round = lambda rounds: sum(r.accepted + 1 for r in rounds) / len(rounds)
    assert per_round(wide) > per_round(chain)


def _check_caches(dec: SpeculativeDecoder) -> None:
    """Both caches hold exactly the kept sequence (gathered, not recomputed) and equal a fresh recompute."""
    ids, drafter = dec.ids, dec.drafter.drafter  # the tree strategy's model drafter: its model and cache
    assert dec.cache.get_seq_length() == dec.cached == ids.shape[1] - 1
    assert drafter.cache.get_seq_length() == drafter.cached <= ids.shape[1]
    for model, cache, cached in ((dec.target, dec.cache, dec.cached), (drafter.model, drafter.cache, drafter.cached)):
        with torch.inference_mode():
            fresh = model(input_ids=ids).logits[0, cached:]
            incremental = model(input_ids=ids[:, cached:], cache=copy.deepcopy(cache), use_cache=True).logits[0]
        torch.testing.assert_close(incremental, fresh, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("shape", ["3-2-1-1", "dynamic:10", "sized:10"])
def test_tree_caches_keep_exactly_the_accepted_path(tiny_pair, temperature, shape):
    ids = encode_prompt(tiny_pair.tokenizer, PROMPTS[3])
    dec = SpeculativeDecoder(
        tiny_pair.target,
        trees(tiny_pair, shape),
        ids,
        DecodeConfig(max_new_tokens=30, tree=shape, temperature=temperature, seed=2),
        set(),
    )
    gathered = 0
    for record in dec:
        gathered += record.accepted >= 2  # breadth-first order: a path of 2 or more nodes is not contiguous
        _check_caches(dec)
    assert gathered >= 2


def test_tree_records_describe_the_tree(tiny_pair):
    ids = encode_prompt(tiny_pair.tokenizer, PROMPTS[0])
    for temperature in (0.0, 0.8):
        _, rounds = decode(
            tiny_pair, trees(tiny_pair, "3-2-1"), ids, max_new_tokens=30, temperature=temperature, seed=1
        )
        for r in rounds[:-1]:  # the last may be cut by the token budget
            assert r.is_tree and r.k == len(r.draft_tokens) == len(r.tree.parents) == len(r.p) == len(r.q) == 3 + 6 + 6
            assert all(-1 <= parent < i for i, parent in enumerate(r.tree.parents))  # parents first
            assert r.tree.path == list(range(r.accepted))
            assert [r.tree.parents[i] for i in r.tree.path] == list(range(-1, r.accepted - 1))  # a root path
            assert all(0 <= x <= 1 for x in r.p + r.q) and 0 <= r.token_q <= 1
            last = r.accepted - 1
            children = [i for i, parent in enumerate(r.tree.parents) if parent == last]
            assert r.token_kind == ("correction" if children else "bonus")
            assert r.token not in [r.draft_tokens[i] for i in children]  # a rejected candidate has no residual mass
            assert r.new_tokens[: r.accepted] == r.draft_tokens[: r.accepted] or r.stop
            assert r.prefill == (ids.shape[1] - 1 if r.round == 0 else 0)  # as a chain round counts it


def test_tree_decoding_refuses_what_it_cannot_run(tiny_pair):
    ids = encode_prompt(tiny_pair.tokenizer, PROMPTS[0])
    with pytest.raises(PlaygroundError, match="drafts a chain only"):
        trees(tiny_pair, "2-2", PromptLookupDrafter())
    with pytest.raises(PlaygroundError, match="drafts a chain only"):
        make_drafter(DrafterSpec(DrafterKind.PROMPT_LOOKUP), tiny_pair, tree=parse_tree("2-2"))
    sliding = copy.copy(tiny_pair.target)
    sliding.config = copy.deepcopy(tiny_pair.target.config)
    sliding.config.layer_types = ["sliding_attention", "full_attention"]
    with pytest.raises(PlaygroundError, match="not full attention"):
        tree.check_tree_model(sliding)


# ------------------------------------------------------------------ Qwen2


@pytest.fixture(scope="module")
def qwen2_pair(tiny_pair):
    """A tiny random Qwen2 target (biased q/k/v projections, its own rotary setup) and a noisy copy as draft."""
    from types import SimpleNamespace

    from transformers import Qwen2Config, Qwen2ForCausalLM

    vocab = tiny_pair.target.config.vocab_size
    eos = tiny_pair.tokenizer.eos_token_id
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.3,
        eos_token_id=eos,
        bos_token_id=eos,
        tie_word_embeddings=False,
    )
    torch.manual_seed(5)
    target = Qwen2ForCausalLM(config).eval()
    draft = Qwen2ForCausalLM(config).eval()
    draft.load_state_dict(target.state_dict())
    with torch.no_grad():
        draft.lm_head.weight.add_(0.3 * draft.lm_head.weight.std() * torch.randn_like(draft.lm_head.weight))
    for model in (target, draft):
        model.generation_config.eos_token_id = eos
        model.generation_config.pad_token_id = eos
    return SimpleNamespace(target=target, draft=draft, tokenizer=tiny_pair.tokenizer, eos={eos})


@pytest.mark.parametrize("shape", ["3-2-1-1", "dynamic:8"])
def test_qwen2_greedy_tree_equals_target_generate_and_keeps_caches_exact(qwen2_pair, shape):
    for prompt in PROMPTS[:3]:
        ids = encode_prompt(qwen2_pair.tokenizer, prompt)
        dec = SpeculativeDecoder(
            qwen2_pair.target,
            trees(qwen2_pair, shape),
            ids,
            DecodeConfig(max_new_tokens=25, tree=shape),
            qwen2_pair.eos,
        )
        for _ in dec:
            _check_caches(dec)
        assert dec.new_tokens == target_greedy(qwen2_pair.target, ids, 25, qwen2_pair.eos)
        assert sum(r.accepted for r in dec.rounds) > 0


# ------------------------------------------------------------------ the sampling rule


def node_rule(q, p, candidates, generator, update_residual: bool = True, renormalise: bool = True):
    """The rule at one node, with the two ways to get it wrong as switches (test-only): not updating the
    residual after a rejection, and not removing the drawn candidates from p (SpecInfer's with-replacement
    form applied to draws without replacement). With both on it must agree with acceptance.select_child."""
    r, p_i = q, p
    for x in candidates:
        u = torch.rand((), generator=generator)
        if u * p_i[x] < r[x]:
            return x
        r = residual(r, p_i) if update_residual else r
        if renormalise:
            p_i = p_i.clone()
            p_i[x] = 0
            p_i = p_i / p_i.sum()
    return int(sample(r, generator))


def node_outputs(rule, p, q, m, samples, seed=0):
    """Draw m children without replacement from p (the drafting's own sampler), run `rule`, collect the token."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(samples):
        candidates = tree._children(p[None], [m], greedy=False, generator=g)[0]
        out.append(rule(q, p, candidates, g))
    return torch.tensor(out)


def production_rule(q, p, candidates, generator):
    return acceptance.select_child(q, p, candidates, generator)[1]


@pytest.mark.parametrize("m", [1, 2, 3])
def test_tree_node_rule_output_follows_the_target_distribution(m):
    vocab, samples = 6, 20_000
    p, q = random_dists(1, vocab, seed=11)[0], random_dists(1, vocab, seed=12)[0]
    stat, critical = fit(node_outputs(production_rule, p, q, m, samples), q)
    assert stat < critical, (m, stat, critical)


@pytest.mark.parametrize("broken", [dict(update_residual=False), dict(renormalise=False)])
def test_a_broken_tree_rule_is_caught_by_the_same_test(broken):
    vocab, samples, m = 6, 20_000, 3
    p, q = random_dists(1, vocab, seed=11)[0], random_dists(1, vocab, seed=12)[0]
    good, _ = fit(node_outputs(lambda *a: node_rule(*a), p, q, m, samples), q)
    stat, critical = fit(node_outputs(lambda *a: node_rule(*a, **broken), p, q, m, samples), q)
    print(f"chi-square, m = {m}: correct rule {good:.1f}, broken {broken} {stat:.1f}, critical {critical:.1f}")
    assert good < critical < stat, (good, stat, critical)


@pytest.mark.parametrize("shape", ["2-2", "dynamic:4", "sized:4", "confidence:6"])
def test_engine_tree_two_token_distribution_equals_target(tiny_pair, shape):
    """End to end through the real loop: the joint law of the first two tokens of a tree decoding,
    over 1,500 seeds, equals the target's (temperature 1.5 and top-k 4: both models leave room to differ)."""
    ids = encode_prompt(tiny_pair.tokenizer, "The quick brown fox jumps over the lazy dog. The quick")
    corrections = []

    def count(seed, r):
        if r.round == 0:
            corrections.append(r.token_kind == "correction")

    stat, df = two_token_test(
        tiny_pair,
        lambda: trees(tiny_pair, shape),
        ids,
        1500,
        count,
        max_new_tokens=2,
        temperature=1.5,
        top_k=4,
        tree=shape,
    )
    assert stat < CHI2_999[df], (stat, df)
    assert 50 < sum(corrections) < 1450  # both kept paths and rejections of every candidate happened


def test_keep_path_moves_the_path_in_filled_layers_and_skips_a_layer_that_holds_nothing():
    """A cache whose deeper layers hold no position yet (None, or the 1-D empty tensor of a lazily made layer):
    the filled layers get the path gathered into place, the empty ones are left as they are."""
    from transformers import DynamicCache, Qwen2Config

    from playground.decoding.tree import keep_path

    config = Qwen2Config(
        num_hidden_layers=3, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64
    )
    cache = DynamicCache(config=config)
    keys = torch.arange(48.0).view(1, 1, 6, 8)
    cache.update(keys, keys + 100, 0)
    cache.layers[1].keys = cache.layers[1].values = torch.tensor([])
    keep_path(cache, 1, [3, 5])
    assert cache.get_seq_length() == 3
    assert cache.layers[0].keys[0, 0, :, 0].tolist() == [0.0, 24.0, 40.0]
    assert cache.layers[0].values[0, 0, :, 0].tolist() == [100.0, 124.0, 140.0]


def _grown(rows: list[list[float]], budget: int = 16, costs=None) -> list[int]:
    """Nodes per depth of a confidence-shaped tree over a draft whose every node has these sorted child p (row d for
    depth d + 1), each depth's best node expanded: what draft_tree's counts and passes decide."""
    from playground.engine.treesize import Growth, RunCosts

    growth, widths, best = Growth(costs or RunCosts(), budget), [], 1.0
    for row in rows:
        taken = growth.take([best * p for p in row])
        if not taken:
            break
        widths.append(taken)
        best *= row[0]
        if not growth.expand(best, taken):
            break
    return widths


def test_a_confidence_shaped_tree_is_a_chain_where_the_draft_is_sure_and_branches_where_it_is_not():
    sure = [[0.97, 0.02, 0.01]] * 12
    unsure = [[0.45, 0.3, 0.15, 0.1]] * 12
    assert _grown(sure) == [1] * len(_grown(sure)) and len(_grown(sure)) >= 8  # a chain, deep
    assert _grown(unsure)[0] >= 2 and sum(_grown(unsure)) <= 16 and len(_grown(unsure)) < len(_grown(sure))
    assert sum(_grown(unsure, budget=5)) == 5  # the cap holds
    assert _grown([[0.03, 0.02]]) == []  # under the floor: no node at all


def test_a_confidence_shaped_tree_learns_its_costs_from_the_runs_rounds():
    """The costs come from the run's rounds, not the warm-up's alone: rounds whose draft passes took five times the
    warm-up's measure (a load that came later) make the tree shallower than the warm-up's costs would."""
    from playground.engine.treesize import RunCosts, TreeCosts

    warm = TreeCosts({1: 0.1, 17: 0.16}, {1: 0.01, 8: 0.012})
    learnt = RunCosts(warm)
    for _ in range(10):  # each round: 10 rows verified in 0.13 s, three draft passes in 0.15 s
        learnt.observe(10, 0.13, [1, 4, 4], 0.15)
    assert 0.9 < learnt.scale["verify"] < 1.0 and learnt.scale["draft"] > 4
    sure = [[0.9, 0.05]] * 12
    assert len(_grown(sure, costs=learnt)) < len(_grown(sure, costs=RunCosts(warm)))
