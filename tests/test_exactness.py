"""Exactly the target's output at bf16: with the batch-invariant kernels (playground/kernels) greedy speculative
decoding equals the target alone and HF generate on the same model object, for every strategy, tree and batch.

The tiny random models decide many near-ties (their logits are close), which makes them a hard case: with
torch's stock bf16 kernels these comparisons are allowed to differ after a near-tie; with the kernels they may
not differ at all. Skipped where the kernels cannot run (tests/kernel_support.py).
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import load_pair, profile, run_all
from playground import models
from playground.models import tiny
from playground.trace import sametext
from playground.kernels import model as kernel_model, wide
from playground.engine.batch import decode_batch
from playground.run.runner import encode_prompt, new_tokens
from playground.core.config import DecodeConfig, DrafterKind, KPolicy
from playground.run.spec import DrafterSpec, PairSpec, RunSpec
from tests.kernel_support import kernel_variant, require_kernels  # noqa: F401 (a fixture)

require_kernels()  # skipped with the reason where the kernels cannot run (tests/kernel_support.py)
# Each test runs on every kernel variant this CPU executes (amx, avx512, avx2, portable); the others skip, saying why.
pytestmark = pytest.mark.usefixtures("kernel_variant")

PROMPTS = ["Once upon a time", "def fibonacci(n):", "The quick brown fox", "Question: what is the capital"]
LONG = " ".join(dict.fromkeys(tiny.CORPUS))  # about 240 tokens: the draft's prompt pass runs wide (kernels/wide.py)


@pytest.fixture(scope="module")
def bf16_spec(tiny_models):
    pair = PairSpec("tiny bf16", str(tiny_models["target"]), str(tiny_models["draft"]), target_precision="bf16")

    def make(prompt: str, drafter=DrafterKind.DRAFT_MODEL, **decode) -> RunSpec:
        d = (
            DrafterSpec.of(drafter, precision="bf16")
            if DrafterSpec(drafter).needs_draft_model
            else DrafterSpec(drafter)
        )
        return RunSpec(
            pair, d, DecodeConfig(**{"max_new_tokens": 40, "policy": KPolicy.FIXED, **decode}), prompt, chat=False
        )

    return make


def hf_greedy(loaded, prompt: str, n: int) -> list[int]:
    ids = encode_prompt(loaded.tokenizer, prompt, chat=False)
    with torch.inference_mode():
        out = loaded.target.generate(ids, do_sample=False, max_new_tokens=n, pad_token_id=loaded.tokenizer.eos_token_id)
    return out[0, ids.shape[1] :].tolist()


@pytest.mark.parametrize(
    "drafter,decode",
    [
        (DrafterKind.DRAFT_MODEL, dict(k=4)),
        (DrafterKind.DRAFT_MODEL, dict(k=7, policy=KPolicy.HEURISTIC)),
        (DrafterKind.DRAFT_MODEL, dict(k=4, policy=KPolicy.THEORY)),
        (DrafterKind.DRAFT_MODEL, dict(k=6, policy=KPolicy.CONFIDENCE)),
        (DrafterKind.DRAFT_MODEL, dict(tree="dynamic:6")),
        (DrafterKind.DRAFT_MODEL, dict(tree="3-2-1-1")),
        (DrafterKind.DRAFT_MODEL, dict(tree="sized:8")),
        (DrafterKind.EARLY_EXIT, dict(tree="sized")),
        (DrafterKind.PROMPT_LOOKUP, dict(k=3)),
        (DrafterKind.SUFFIX, dict(k=6)),
        (DrafterKind.SUFFIX, dict(tree="dynamic:6")),
        (DrafterKind.LOOKAHEAD, dict()),
        (DrafterKind.EARLY_EXIT, dict(k=2)),
        (DrafterKind.STAGED, dict(k=4)),
    ],
)
def test_greedy_output_is_exactly_the_targets_with_the_invariant_kernels(runner, bf16_spec, drafter, decode):
    for prompt in PROMPTS:
        spec = bf16_spec(prompt, drafter, **decode)
        loaded = load_pair(runner, spec)
        rounds, base = run_all(runner, spec), run_all(runner, spec.baseline())
        assert loaded.invariant and loaded.target.dtype is torch.bfloat16
        verdict = sametext.compare_outputs(rounds, base, "bf16", exact=True)
        assert verdict["equal"], (prompt, verdict)
        assert new_tokens(base) == hf_greedy(loaded, prompt, len(new_tokens(base)))


@pytest.mark.parametrize("precision", ["int4"])
@pytest.mark.parametrize("decode", [dict(k=6, policy=KPolicy.CONFIDENCE), dict(tree="dynamic:6")])
def test_greedy_output_with_a_quantised_draft_is_exactly_the_targets(runner, bf16_spec, precision, decode):
    """The draft's precision changes which tokens it proposes, never what the bf16 target keeps; nor does its long
    prompt's pass on torch's matmul (from 128 rows here, on every CPU)."""
    for prompt in [*PROMPTS, LONG]:
        plain = bf16_spec(prompt, **decode)
        spec = RunSpec(
            plain.pair, DrafterSpec.of(DrafterKind.DRAFT_MODEL, precision=precision), plain.decode, prompt, chat=False
        )
        loaded = load_pair(runner, spec)
        assert loaded.draft.model.layers[0]._bi.qkv.precision == precision  # the kernels' quantised draft
        with wide.threshold(128):
            rounds, base = run_all(runner, spec), run_all(runner, spec.baseline())
        verdict = sametext.compare_outputs(rounds, base, "bf16", exact=True)
        assert verdict["equal"], (prompt, verdict)
        assert new_tokens(base) == hf_greedy(loaded, prompt, len(new_tokens(base)))


def test_the_batched_engine_gives_every_row_its_solo_output(runner, bf16_spec):
    spec = bf16_spec(PROMPTS[0])
    loaded = load_pair(runner, spec, warm=True)
    ids = [encode_prompt(loaded.tokenizer, p, chat=False)[0].tolist() for p in PROMPTS * 2]
    solo = {p: new_tokens(run_all(runner, bf16_spec(p).baseline())) for p in PROMPTS}
    for size in (1, 2, 4, 8):
        for k in (0, 3):
            result = decode_batch(loaded.target, loaded.draft, ids[:size], k, 40, loaded.eos)
            for i, out in enumerate(result.outputs):
                assert out == solo[PROMPTS[i % len(PROMPTS)]], (size, k, i)


def test_switching_the_kernels_off_is_per_run_and_shows(runner, bf16_spec):
    spec = bf16_spec(PROMPTS[1])
    stock = RunSpec(
        PairSpec(spec.pair.name, spec.pair.target, spec.pair.draft, "bf16", invariant=False),
        spec.drafter,
        spec.decode,
        spec.prompt,
        chat=False,
    )
    loaded = load_pair(runner, stock)
    run_all(runner, stock)
    assert not loaded.invariant and not kernel_model.is_invariant(loaded.target)
    assert profile(runner, stock) is not None
    run_all(runner, spec)
    assert loaded.invariant  # each run sets the kernels it asked for; both have their own V(n) profile
    assert profile(runner, stock).verify_s != profile(runner, spec).verify_s


def test_an_exact_comparison_never_calls_a_difference_a_near_tie():
    def run(tokens, margin):
        return sametext.as_rounds(tokens, [margin] * len(tokens))

    a, b = run([1, 2, 3], 0.01), run([1, 2, 4], 0.01)
    assert sametext.compare_outputs(a, b, "bf16")["near_tie"]  # stock kernels: a gap of 0.01 is a near-tie
    assert not sametext.compare_outputs(a, b, "bf16", exact=True)["near_tie"]


def test_the_default_pair_precisions_load_the_kernels(tiny_models):
    """A bf16 target is switched to the kernels when it loads; an int8 draft gets the int8 kernels."""
    loaded = models.load_pair(
        str(tiny_models["draft"]), str(tiny_models["target"]), target_precision="bf16", draft_precision="int8"
    )
    assert kernel_model.is_invariant(loaded.target)
    assert all(layer.self_attn.q_proj.weight.numel() == 0 for layer in loaded.draft.model.layers)
    int4 = models.load_pair(
        str(tiny_models["draft"]), str(tiny_models["target"]), target_precision="bf16", draft_precision="int4"
    )
    assert all(layer._bi.gate_up.precision == "int4" for layer in int4.draft.model.layers)
