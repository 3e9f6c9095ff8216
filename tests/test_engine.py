"""The decoding loop: lossless greedy output, caches, k schedule, limits, seeding."""

from __future__ import annotations

import copy

import pytest
import torch

from playground.core import theory
from playground.decoding import make_drafter
from playground.decoding.lookup import NoDrafter, PromptLookupDrafter, lookup
from playground.decoding.model import ModelDrafter
from playground.engine import KSchedule, SpeculativeDecoder
from playground.core.errors import PlaygroundError
from playground.run.runner import encode_prompt
from playground.core.config import DecodeConfig, DrafterKind, KPolicy, K_MAX, K_MIN
from playground.run.spec import DrafterSpec
from tests.helpers import PROMPTS, decode, target_greedy


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 16])
@pytest.mark.parametrize("kind", list(DrafterKind)[:3])
def test_greedy_output_equals_target_generate(tiny_pair, k, kind):
    for i, prompt in enumerate(PROMPTS):
        ids = encode_prompt(tiny_pair.tokenizer, prompt)
        max_new = [1, 2, 7, 40][i % 4]  # 1 and 2 leave less budget than k
        drafter = make_drafter(DrafterSpec(kind), tiny_pair)
        dec, rounds = decode(tiny_pair, drafter, ids, max_new_tokens=max_new, k=k)
        assert dec.new_tokens == target_greedy(tiny_pair.target, ids, max_new, tiny_pair.eos), (prompt, k)
        assert sum(r.k for r in rounds) > 0 or max_new == 1 or kind is DrafterKind.PROMPT_LOOKUP


def test_greedy_adaptive_k_equals_target_generate(tiny_pair):
    for prompt in PROMPTS:
        ids = encode_prompt(tiny_pair.tokenizer, prompt)
        dec, _ = decode(tiny_pair, ModelDrafter(tiny_pair.draft), ids, max_new_tokens=50, k=3, policy=KPolicy.HEURISTIC)
        assert dec.new_tokens == target_greedy(tiny_pair.target, ids, 50, tiny_pair.eos)


def test_baseline_is_target_greedy_and_one_token_per_round(tiny_pair):
    ids = encode_prompt(tiny_pair.tokenizer, PROMPTS[0])
    dec, rounds = decode(tiny_pair, NoDrafter(), ids, max_new_tokens=30)
    assert dec.new_tokens == target_greedy(tiny_pair.target, ids, 30, tiny_pair.eos)
    assert all(r.k == 0 and r.token_kind == "target" and len(r.new_tokens) == 1 for r in rounds)


def test_eos_inside_a_draft_stops_there(twin_pair):
    """Make a token the target emits mid-sequence the EOS: with a twin draft (all accepted)
    and k=8 it lands inside a draft; nothing after it may be emitted."""
    ids = encode_prompt(twin_pair.tokenizer, PROMPTS[1])
    free = target_greedy(twin_pair.target, ids, 30, set())
    pos = next(i for i in range(5, 30) if free[i] not in free[:i])  # first occurrence at i >= 5
    eos = {free[pos]}
    dec, rounds = decode(twin_pair, ModelDrafter(twin_pair.draft), ids, eos=eos, max_new_tokens=30, k=8)
    assert dec.new_tokens == free[: pos + 1] == target_greedy(twin_pair.target, ids, 30, eos)
    assert rounds[-1].stop == "eos"
    last = rounds[-1]
    assert last.accepted == last.k and len(last.new_tokens) < last.k + 1  # cut inside the draft


def test_never_emits_past_max_new_tokens(tiny_pair, twin_pair):
    ids = encode_prompt(tiny_pair.tokenizer, PROMPTS[2])
    for pair in (tiny_pair, twin_pair):
        for max_new in (1, 3, 9, 17):
            for k in (1, 4, 16):
                for temperature in (0.0, 1.0):
                    dec, rounds = decode(
                        pair,
                        ModelDrafter(pair.draft),
                        ids,
                        eos=set(),
                        max_new_tokens=max_new,
                        k=k,
                        temperature=temperature,
                    )
                    assert len(dec.new_tokens) == max_new
                    assert rounds[-1].stop == "length"
                    assert sum(len(r.new_tokens) for r in rounds) == max_new


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_identical_draft_is_accepted_every_time(twin_pair, temperature):
    ids = encode_prompt(twin_pair.tokenizer, PROMPTS[0])
    dec, rounds = decode(
        twin_pair,
        ModelDrafter(twin_pair.draft),
        ids,
        eos=set(),
        max_new_tokens=60,
        k=5,
        temperature=temperature,
        seed=3,
    )
    drafted = sum(r.k for r in rounds)
    assert drafted > 0 and sum(r.accepted for r in rounds) == drafted
    assert all(r.token_kind == "bonus" for r in rounds if r.k > 0)


def _check_caches(dec: SpeculativeDecoder, drafter: ModelDrafter) -> None:
    """Both caches hold exactly the kept prefix, and what they hold equals a fresh recompute."""
    ids = dec.ids
    assert dec.cache.get_seq_length() == dec.cached == ids.shape[1] - 1
    assert drafter.cache.get_seq_length() == drafter.cached <= ids.shape[1]
    for model, cache, cached in ((dec.target, dec.cache, dec.cached), (drafter.model, drafter.cache, drafter.cached)):
        with torch.inference_mode():
            fresh = model(input_ids=ids).logits[0, cached:]
            probe = copy.deepcopy(cache)
            incremental = model(input_ids=ids[:, cached:], cache=probe, use_cache=True).logits[0]
        torch.testing.assert_close(incremental, fresh, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_caches_stay_consistent_after_rejections(tiny_pair, temperature):
    ids = encode_prompt(tiny_pair.tokenizer, PROMPTS[3])
    drafter = ModelDrafter(tiny_pair.draft)
    dec = SpeculativeDecoder(
        tiny_pair.target, drafter, ids, DecodeConfig(max_new_tokens=40, k=6, temperature=temperature, seed=1), set()
    )
    rejections = 0
    for record in dec:
        rejections += record.accepted < record.k
        _check_caches(dec, drafter)
    assert rejections >= 2  # the check ran after real rejections


def test_adaptive_k_stays_within_bounds(tiny_pair, twin_pair):
    ids = encode_prompt(tiny_pair.tokenizer, PROMPTS[0])
    _, grown = decode(
        twin_pair, ModelDrafter(twin_pair.draft), ids, eos=set(), max_new_tokens=200, k=1, policy=KPolicy.HEURISTIC
    )
    ks = [r.k for r in grown[:-1]]  # the last round may be cut by the budget
    assert ks[:3] == [1, 3, 5] and max(ks) == K_MAX and all(K_MIN <= k <= K_MAX for k in ks)
    _, shrunk = decode(
        tiny_pair, ModelDrafter(tiny_pair.draft), ids, eos=set(), max_new_tokens=120, k=16, policy=KPolicy.HEURISTIC
    )
    assert all(K_MIN <= r.k <= K_MAX for r in shrunk[:-1]) and min(r.k for r in shrunk) < 16


def test_k_schedule_rule():
    s = KSchedule(4, KPolicy.HEURISTIC)
    s.update(4, 4)
    assert s.k == 6
    s.update(6, 2)
    assert s.k == 5
    for _ in range(20):
        s.update(s.k, s.k)
    assert s.k == K_MAX
    for _ in range(30):
        s.update(s.k, 0)
    assert s.k == K_MIN
    fixed = KSchedule(4, KPolicy.FIXED)
    fixed.update(4, 4)
    fixed.update(4, 0)
    assert fixed.k == 4


def test_sampling_is_seeded(tiny_pair):
    ids = encode_prompt(tiny_pair.tokenizer, PROMPTS[1])
    outs = [
        decode(
            tiny_pair,
            ModelDrafter(tiny_pair.draft),
            ids,
            eos=set(),
            max_new_tokens=30,
            k=4,
            temperature=1.0,
            top_p=0.9,
            seed=s,
        )[0].new_tokens
        for s in (7, 7, 8)
    ]
    assert outs[0] == outs[1] and outs[0] != outs[2]


def test_records_carry_probabilities_and_times(tiny_pair):
    ids = encode_prompt(tiny_pair.tokenizer, PROMPTS[0])
    _, rounds = decode(tiny_pair, ModelDrafter(tiny_pair.draft), ids, max_new_tokens=30, k=4, temperature=0.8, seed=2)
    for r in rounds:
        assert len(r.p) == len(r.q) == len(r.draft_tokens) == r.k
        assert all(0 <= x <= 1 for x in r.p + r.q) and r.draft_s >= 0 and r.verify_s > 0
        assert len(r.u) == min(r.k, r.accepted + 1)  # one uniform per evaluated draft token
        for i, u in enumerate(r.u):  # accepted exactly when u < min(1, q/p)
            assert (u * r.p[i] < r.q[i]) == (i < r.accepted)
        assert r.new_tokens[: r.accepted] == r.draft_tokens[: r.accepted] or r.stop
    assert [r.total_new for r in rounds] == list(torch.tensor([len(r.new_tokens) for r in rounds]).cumsum(0))


def test_prompt_lookup_drafts_from_the_text_so_far():
    seq = [1, 2, 3, 4, 5, 9, 2, 3]
    assert lookup(seq, 3) == [4, 5, 9]  # matches "2 3" earlier
    assert lookup([1, 2, 3], 2) == []
    assert lookup([5, 5], 4) == [5]
    drafter = PromptLookupDrafter()
    draft = drafter.propose(torch.tensor([seq]), 2, DecodeConfig().sampling, None)
    assert draft.tokens.tolist() == [4, 5] and draft.logits is None


@pytest.mark.parametrize("precision", ["fp32", "bf16", "int8"])
def test_draft_precision_and_verify_kernel_keep_greedy_output_equal_to_stock_target(tiny_models, precision):
    """A cheaper draft and the CPU verify kernel change speed, never the output: the reference
    here is HF generate on the fp32 target with its stock kernels."""
    from playground import models
    from playground.engine import speed

    pair = models.load_pair(
        str(tiny_models["draft"]), str(tiny_models["target"]), target_precision="fp32", draft_precision=precision
    )
    assert pair.draft_precision.value == precision
    if precision == "int8":  # quantised at load: the draft's Linears, LM head included, are int8
        linears = [m for m in pair.draft.modules() if isinstance(m, torch.nn.Linear)]
        if hasattr(
            pair.draft, "_int8_bytes"
        ):  # the VNNI kernels: each Linear keeps an int8 copy, its bf16 weight freed
            assert linears and all(
                m.weight.numel() == 0 or m.weight is pair.draft.get_input_embeddings().weight for m in linears
            )
            assert pair.draft.get_input_embeddings().weight.dtype == torch.bfloat16  # a lookup: stays bf16
        else:  # torch's dynamic int8: the Linears are replaced by packed ones
            assert not linears
            assert pair.draft.get_input_embeddings().weight.dtype == torch.float32  # a lookup: stays fp32
    for prompt in PROMPTS[:4]:
        ids = encode_prompt(pair.tokenizer, prompt)
        speed.fast_verify(pair.target, False)
        try:
            reference = target_greedy(pair.target, ids, 30, pair.eos)
        finally:
            speed.fast_verify(pair.target, True)  # as load_pair leaves it
        dec, rounds = decode(
            pair, make_drafter(DrafterSpec(DrafterKind.DRAFT_MODEL), pair), ids, max_new_tokens=30, k=6
        )
        assert dec.new_tokens == reference
        assert sum(r.accepted for r in rounds) > 0


def test_theory_k_policy_follows_the_cost_profile():
    """Flat verify cost and good drafts -> long drafts; verify cost growing per token -> short ones;
    drafts that never pay -> no drafting at all (k = 0, the floor)."""
    flat = KSchedule(4, KPolicy.THEORY, theory.CostProfile({1: 0.5, 17: 0.5}, draft_s=0.01))
    for _ in range(10):
        flat.update(flat.k, max(flat.k - 1, 0))
    assert flat.k >= 8
    steep = KSchedule(4, KPolicy.THEORY, theory.CostProfile({1: 0.5, 3: 0.55, 17: 8.5}, draft_s=0.05))
    for _ in range(10):
        steep.update(steep.k, steep.k // 2)
    assert 1 <= steep.k <= 2
    useless = KSchedule(4, KPolicy.THEORY, theory.CostProfile({1: 0.5, 17: 0.6}, draft_s=0.3))
    for _ in range(6):
        useless.update(useless.k, 0)
    assert useless.k == 0
    for _ in range(12):  # plain steps: the evidence decays back to the prior, and drafting is tried again
        useless.update(0, 0)
    assert useless.k == 0 or useless.alpha.alpha > 0.3


def test_theory_k_policy_without_a_profile_uses_the_runs_own_timings():
    s = KSchedule(4, KPolicy.THEORY)
    s.update(4, 3, draft_s=0.04, verify_s=9.0, first=True)  # the prompt's pass: not a verify cost
    s.update(4, 3, draft_s=0.04, verify_s=0.5)
    assert s._verify_s == {5: 0.5} and s.k >= 4


def test_theory_k_policy_is_lossless_and_in_bounds(tiny_pair):
    for prompt in PROMPTS[:4]:
        ids = encode_prompt(tiny_pair.tokenizer, prompt)
        dec, rounds = decode(
            tiny_pair, ModelDrafter(tiny_pair.draft), ids, max_new_tokens=40, k=4, policy=KPolicy.THEORY
        )
        assert dec.new_tokens == target_greedy(tiny_pair.target, ids, 40, tiny_pair.eos)
        assert all(0 <= r.k <= K_MAX for r in rounds[:-1])


def test_early_exit_draft_is_the_targets_first_layers_and_shares_its_weights(tiny_pair):
    from playground.decoding.early_exit import early_exit_model

    target = tiny_pair.target
    ids = encode_prompt(tiny_pair.tokenizer, PROMPTS[2])
    with torch.inference_mode():
        before = target(ids).logits
        full = target(ids, output_hidden_states=True)
        shallow = early_exit_model(target, 1)
        expected = target.lm_head(target.model.norm(full.hidden_states[1]))  # hidden_states[1] = after layer 1
        got = shallow(ids).logits
        after = target(ids).logits
    assert torch.allclose(got, expected, atol=1e-5)
    assert not torch.allclose(got, before, atol=1e-3)  # one layer is not the whole target
    assert torch.equal(before, after) and target.config.num_hidden_layers == 2  # the target is untouched
    assert shallow.lm_head.weight.data_ptr() == target.lm_head.weight.data_ptr()  # shared, not copied
    for bad in (0, 2, 1.5, True):
        with pytest.raises(PlaygroundError, match="early-exit layer must be a whole number from 1 to 1"):
            early_exit_model(target, bad)


def test_theory_pause_probes_with_one_draft_token_and_resumes_when_drafts_pay():
    """A pause chosen on costly evidence (here: a prior alpha too low for this c) must end when the
    text turns out to be easy: every PROBE_EVERY + 1 plain steps one token is drafted."""
    from playground.engine import PROBE_EVERY

    s = KSchedule(4, KPolicy.THEORY, theory.CostProfile({1: 0.5, 17: 0.55}, draft_s=0.25))
    s.update(4, 0)
    assert s.k == 0
    ks = []
    for _ in range(3 * (PROBE_EVERY + 1)):
        s.update(s.k, s.k)  # every draft it makes is accepted
        ks.append(s.k)
    assert 1 in ks[: PROBE_EVERY + 1]  # the first probe came within PROBE_EVERY + 1 rounds
    assert ks[-1] >= 2  # accepted probes raised alpha until drafting pays: it drafts again


@pytest.mark.parametrize("kind", [DrafterKind.DRAFT_MODEL, DrafterKind.EARLY_EXIT])
def test_confidence_policy_is_lossless_and_stops_unsure_drafts_early(tiny_pair, kind):
    """KPolicy.CONFIDENCE: k is the most a draft holds; a draft stops once its top p falls under the
    threshold. Greedy output stays the target's; a high threshold gives shorter drafts than none."""
    from playground.run.runner import drafter_confidence

    prompts = [encode_prompt(tiny_pair.tokenizer, p) for p in PROMPTS[:3]]
    references = [target_greedy(tiny_pair.target, ids, 30, tiny_pair.eos) for ids in prompts]
    lengths = {}
    for threshold in (0.0, 0.4, 0.95):
        config = DecodeConfig(max_new_tokens=30, k=6, policy=KPolicy.CONFIDENCE, confidence=threshold)
        drafted = []
        for ids, reference in zip(prompts, references):
            drafter = make_drafter(DrafterSpec(kind), tiny_pair, confidence=drafter_confidence(config))
            assert drafter.confidence == threshold
            dec = SpeculativeDecoder(tiny_pair.target, drafter, ids, config, tiny_pair.eos)
            rounds = list(dec)
            assert dec.new_tokens == reference, threshold
            drafted += [r.k for r in rounds if r.k and not r.stop]
        assert all(1 <= k <= 6 for k in drafted)
        lengths[threshold] = sum(drafted) / len(drafted)
    assert lengths[0.0] > 5.5  # no threshold: every draft is k long (but where the token budget cuts it)
    assert lengths[0.95] < lengths[0.4] <= lengths[0.0] and lengths[0.95] < 3, lengths
    assert drafter_confidence(DecodeConfig(policy=KPolicy.FIXED, confidence=0.9)) == 0.0  # other policies: off
