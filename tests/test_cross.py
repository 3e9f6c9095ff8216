"""Cross-tokenizer drafting (playground/decoding/cross.py): a draft model with its own tokenizer, its drafts
translated into the target's tokens through text, verified as a deterministic draft (p one-hot).

Lossless: greedy output token-identical to the target alone on pairs of different tokenizers; when
sampling, the joint law of the first two tokens equals the target's (the chi-square test of
test_sampling.py), and the same test catches a rule broken on purpose.
"""

from __future__ import annotations

import pytest
import torch

from playground import models
from playground.models import tiny
from playground.decoding import make_drafter
from playground.decoding.chain import ChainDraft
from playground.decoding.cross import CrossTokenizerDrafter, continuation, to_target
from playground.engine import SpeculativeDecoder
from playground.core.errors import PlaygroundError
from playground.core.records import CrossExtras
from playground.run.runner import Runner, encode_prompt, new_tokens
from playground.decoding import DRAFTERS
from playground.core.config import DecodeConfig, DrafterKind, KPolicy
from playground.run.spec import DrafterSpec, PairSpec, RunSpec, parse_drafter, parse_drafter_name
from tests.helpers import FIXED_64, run_all, CHI2_999, two_token_test, load_pair

CROSS = DrafterKind.CROSS_TOKENIZER


@pytest.fixture(scope="session")
def cross_pair(cross_models) -> models.LoadedPair:
    return models.load_pair(
        cross_models["draft"],
        cross_models["target"],
        target_precision="fp32",
        draft_precision="fp32",
        same_tokenizer=False,
    )


def spec(draft: str, target: str, prompt: str, drafter: DrafterSpec | None = None, **decode) -> RunSpec:
    return RunSpec(
        PairSpec("cross (test)", target, draft),
        drafter or DrafterSpec.of(CROSS, precision="fp32"),
        DecodeConfig(**(FIXED_64 | decode)),
        prompt,
    )


def target_greedy(pair: models.LoadedPair, prompt: str, n: int) -> list[int]:
    ids = encode_prompt(pair.tokenizer, prompt)
    with torch.inference_mode():
        out = pair.target.generate(
            ids, do_sample=False, max_new_tokens=n, eos_token_id=sorted(pair.eos), pad_token_id=0
        )
    return out[0, ids.shape[1] :].tolist()


# ---------------------------------------------------------------- greedy: token-identical to the target alone

PROMPTS = [
    "Once upon a time",
    "The quick brown",
    "def fibonacci(n):",
    "Question: what is",
    "for i in range(1",
    "zebra Ωmega ünïcode 😀 text",
]


@pytest.mark.parametrize(
    "draft, target",
    [("draft", "target"), ("other", "random"), ("same", "random")],
    ids=["trained pair", "random pair", "same tokenizer"],
)
def test_greedy_output_equals_target_alone(runner, cross_models, draft, target):
    """Whatever the translation proposes, the target keeps only its own argmax: the output is the target's
    own generate, for every k and k policy, on pairs of different tokenizers (and on one of the same)."""
    accepted = 0
    for prompt in PROMPTS:
        for k, policy in ((1, KPolicy.FIXED), (3, KPolicy.FIXED), (6, KPolicy.FIXED), (4, KPolicy.THEORY)):
            s = spec(cross_models[draft], cross_models[target], prompt, max_new_tokens=30, k=k, policy=policy)
            rounds = run_all(runner, s)
            pair = load_pair(runner, s)
            assert new_tokens(rounds) == target_greedy(pair, prompt, 30) == new_tokens(run_all(runner, s.baseline())), (
                prompt,
                k,
                policy,
            )
            if policy is KPolicy.FIXED:  # at most k draft steps, k target tokens (THEORY picks its own k)
                assert all(r.k <= k and len(r.extras.pieces) <= k for r in rounds)
            accepted += sum(r.accepted for r in rounds)
    if draft == "draft":
        assert accepted > 100  # two models that agree on text: the translation is accepted often


def test_a_sliding_window_draft_runs_past_its_window(cross_pair, tmp_path):
    """A Gemma 3 style draft (sliding-window layers, here an 8-token window): each round crops its cache
    back to where the re-encoded text differs, which a sliding layer past its window cannot do; the
    drafter's cache keeps full layers (the model's mask applies the window)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    draft_tok = tiny.build_metaspace_tokenizer(tmp_path / "gemma-like")
    config = Gemma3TextConfig(
        vocab_size=len(draft_tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=512,
        eos_token_id=draft_tok.eos_token_id,
        pad_token_id=draft_tok.eos_token_id,
    )
    torch.manual_seed(0)
    draft = Gemma3ForCausalLM(config).eval()
    prompt = "The quick brown fox jumps over the lazy dog. Once upon a time"
    ids = encode_prompt(cross_pair.tokenizer, prompt)
    drafter = CrossTokenizerDrafter(
        draft, draft_tok, cross_pair.tokenizer, encode_prompt(draft_tok, prompt)[0].tolist()
    )
    dec = SpeculativeDecoder(cross_pair.target, drafter, ids, DecodeConfig(max_new_tokens=30, k=4), cross_pair.eos)
    rounds = list(dec)
    assert dec.new_tokens == target_greedy(cross_pair, prompt, 30)
    assert sum(r.k for r in rounds) > 0 and len(drafter.cached) > 2 * config.sliding_window


def test_int8_draft_and_step_through_stay_identical(runner, cross_models):
    s = spec(
        cross_models["draft"],
        cross_models["target"],
        "The quick brown",
        DrafterSpec.of(CROSS, precision="int8"),
        max_new_tokens=20,
        k=4,
    )
    with runner.session(s) as session:
        dec = session.decoder()
        rounds = [dec.step() for _ in range(3)]
        rounds += list(dec)
    assert new_tokens(rounds) == target_greedy(session.pair, s.prompt, 20)


def test_rounds_record_the_draft_side(runner, cross_models, cross_pair):
    """Each round keeps the draft's own tokens as text, for a view to show on hover."""
    rounds = run_all(
        runner, spec(cross_models["draft"], cross_models["target"], "Once upon a time", max_new_tokens=24, k=4)
    )
    drafted = [r for r in rounds if r.k]
    assert all(isinstance(r.extras, CrossExtras) for r in rounds)
    assert drafted and all(r.extras.pieces and r.extras.text for r in drafted)
    for r in drafted:
        assert len(r.extras.source) == r.k and all(r.extras.source)
        target_text = cross_pair.tokenizer.decode(r.draft_tokens)
        assert r.extras.text.startswith(target_text)  # the proposal spells a prefix of the draft's text
        assert target_text in "".join(r.extras.pieces)
    assert rounds[0].p == [1.0] * rounds[0].k  # p is one-hot on the proposal: the rule that ran


# ---------------------------------------------------------------- sampling: the target's distribution exactly

CHI_PROMPT = "Once upon a time there was a little"
CHI_CONFIG = dict(max_new_tokens=2, k=2, temperature=1.5, top_k=4)


class TranslatedPDrafter(CrossTokenizerDrafter):
    """Broken on purpose: the proposal (still the draft's greedy choice, translated) is given the
    draft's distribution translated into target tokens as p, instead of p one-hot: the draft's top-4
    tokens at the step that produced the first proposed token, each mapped through text to its first
    target token, their probabilities summed per target token."""

    def propose(self, ids, k, params, generator):
        draft = super().propose(ids, k, params, generator)
        if not draft.tokens.numel():
            return draft
        last, seq = self.last, ids[0].tolist()
        step = last.source_idx[0][0]
        probs = torch.softmax(last.logits[step].float(), -1)
        top = torch.topk(probs, 4)
        p = torch.zeros(len(self.target_tok), dtype=torch.float64)
        for prob, token in zip(top.values.tolist(), top.indices.tolist()):
            text = continuation(self.draft_tok, last.anchor, last.draft_ids[:step] + [token])
            translated = to_target(self.target_tok, seq, text)
            if translated:
                p[translated[0]] += prob
        logits = torch.full((draft.tokens.numel(), len(self.target_tok)), float("-inf"))
        logits[0] = params.temperature * torch.log(p / p.sum()).float()  # logits_to_probs divides by T again
        for i, token in enumerate(draft.tokens.tolist()[1:], 1):  # later positions (none at k = 1): one-hot
            logits[i, token] = 0.0
        return ChainDraft(draft.tokens, logits)


def two_token_test_of(pair, drafter_class, runs: int = 2000) -> tuple[float, int, float]:
    """two_token_test with a drafter of this class on the cross pair: (chi-square, df, alpha)."""
    ids = encode_prompt(pair.tokenizer, CHI_PROMPT)
    draft_prompt = encode_prompt(pair.draft_tokenizer, CHI_PROMPT)[0].tolist()
    seen = {"accepted": 0, "drafted": 0}

    def count(seed, r):
        seen["accepted"] += r.accepted
        seen["drafted"] += r.k

    stat, df = two_token_test(
        pair,
        lambda: drafter_class(pair.draft, pair.draft_tokenizer, pair.tokenizer, draft_prompt),
        ids,
        runs,
        count,
        **CHI_CONFIG,
    )
    return stat, df, seen["accepted"] / max(1, seen["drafted"])


def test_sampling_keeps_the_target_distribution(cross_pair):
    """End to end through the real loop on two tokenizers: the joint law of the first two tokens over
    2,000 seeds equals the target's (chi-square at 1e-3), with accepts and rejections both happening."""
    stat, df, alpha = two_token_test_of(cross_pair, CrossTokenizerDrafter)
    assert stat < CHI2_999[df], (stat, df)
    assert 0.2 < alpha < 0.95, alpha


def test_the_same_test_catches_a_rule_broken_on_purpose(cross_pair):
    """p = the draft's translated distribution while the proposal is its greedy choice: not lossless."""
    stat, df, _ = two_token_test_of(cross_pair, TranslatedPDrafter)
    assert stat > CHI2_999[df], (stat, df)


# ---------------------------------------------------------------- text round trips


def test_translation_keeps_the_targets_own_tokens_as_a_stable_prefix(cross_pair):
    tok = cross_pair.tokenizer
    seq = tok("Once upon a time there").input_ids
    assert tok.decode(seq + to_target(tok, seq, " was a little fox")) == "Once upon a time there was a little fox"
    # The target stopped inside a word: whichever way the tail re-encodes, the proposal spells the text.
    cut = tok("Once upon a time there was a").input_ids + tok(" l").input_ids
    out = to_target(tok, cut, "ittle fox")
    assert tok.decode(cut + out).endswith(" little fox")
    assert to_target(tok, seq, "") == []


def test_the_drafts_text_is_what_its_tokens_add_after_the_context(cross_pair):
    """Metaspace decoding drops nothing when the draft's tokens are decoded after their context."""
    dtok = cross_pair.draft_tokenizer
    context = dtok("Once upon a").input_ids
    assert continuation(dtok, context, dtok(" time there").input_ids) == " time there"


def test_a_character_cut_between_tokens_is_held_back(cross_pair):
    """Byte-level tokens can end inside a character: the drafter proposes nothing until it is whole."""
    drafter = make_drafter(DrafterSpec(CROSS), cross_pair)
    ids = encode_prompt(cross_pair.tokenizer, "Once upon a time")
    emoji = cross_pair.tokenizer("😀").input_ids
    assert len(emoji) > 1
    drafter.propose(ids, 3, DecodeConfig().sampling, None)
    half = torch.cat([ids, torch.tensor([emoji[:1]])], 1)
    assert drafter.propose(half, 3, DecodeConfig().sampling, None).tokens.numel() == 0


# ---------------------------------------------------------------- spec, runner, refusal


def test_the_cross_tokenizer_drafter_is_parsed_like_the_others():
    assert CROSS in DRAFTERS
    assert parse_drafter_name("cross-tokenizer draft model:int8") == DrafterSpec.of(CROSS, precision="int8")
    assert parse_drafter("cross-tokenizer draft model", "bf16", {"exit_layer": 3}) == DrafterSpec.of(
        CROSS, precision="bf16"
    )
    assert DrafterSpec.of(CROSS, precision="int8").label == "cross-tokenizer draft model (int8)"
    assert DrafterSpec(CROSS).needs_draft_model and not DrafterSpec(CROSS).same_tokenizer
    with pytest.raises(PlaygroundError, match="'cross-tokenizer draft model' drafter needs a pair with a draft"):
        RunSpec(PairSpec("p", "some/target"), DrafterSpec(CROSS), DecodeConfig(), "hi")


def test_the_same_tokenizer_drafter_refuses_a_cross_pair_and_names_the_cross_drafter(cross_models):
    with pytest.raises(PlaygroundError, match="incompatible.*cross-tokenizer draft model"):
        load_pair(
            Runner(), spec(cross_models["draft"], cross_models["target"], "hi", DrafterSpec(DrafterKind.DRAFT_MODEL))
        )
    loaded = load_pair(
        Runner(), spec(cross_models["draft"], cross_models["target"], "hi")
    )  # the cross drafter loads it
    assert len(loaded.draft_tokenizer) != len(loaded.tokenizer)


def test_the_runner_gives_the_draft_the_targets_prompt_as_text(cross_pair):
    """The draft's context is the target's prompt (its chat template included) decoded and re-encoded."""
    drafter = make_drafter(DrafterSpec(CROSS), cross_pair)
    assert isinstance(drafter, CrossTokenizerDrafter) and drafter.draft_prompt is None
    ids = encode_prompt(cross_pair.tokenizer, "Once upon a time")
    drafter.propose(ids, 2, DecodeConfig().sampling, None)
    text = cross_pair.tokenizer.decode(ids[0], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert drafter.prompt == cross_pair.draft_tokenizer(text, add_special_tokens=False).input_ids


def test_the_benchmark_runs_hf_universal_assisted_as_the_peer(cross_models):
    """bench.run_grid gives the cross-tokenizer drafter its HF peer (universal assisted decoding on the same
    draft object, its own tokenizer): both greedy outputs equal the target alone, with the draft's precision."""
    from playground.bench import grid_frame, hf, run_grid

    pair = PairSpec("cross (test)", cross_models["target"], cross_models["draft"])
    results = run_grid(
        Runner(),
        [pair],
        {"story": "Once upon a time", "code": "def fibonacci(n):"},
        [DecodeConfig(max_new_tokens=16, k=3, policy=KPolicy.FIXED)],
        [DrafterSpec.of(CROSS, precision="fp32")],
        compare_hf=True,
    )
    methods = {r.method for r in results}
    assert methods == {"target alone", "cross-tokenizer draft model (fp32)", hf.HF_TARGET_ALONE, hf.HF_UNIVERSAL}
    universal = [r for r in results if r.method == hf.HF_UNIVERSAL]
    assert len(universal) == 2 and all(r.k == "3" and r.draft_precision == "fp32" for r in universal)
    assert all(r.greedy_equal is True for r in results if r.method != "target alone")
    ours = [r for r in results if r.engine == "ours" and r.drafter == CROSS.value]
    assert all(r.draft_precision == "fp32" for r in ours)
    assert grid_frame(results).loc[lambda f: f["engine"] == "ours", "vs_best_hf"].notna().all()
