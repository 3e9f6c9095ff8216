"""The offline default pair on a fresh machine: packs assembled, verified, converted, loaded at the
device's default precisions, and speculative decoding lossless against the target alone at the same
precision. Short on purpose: one load per test session, 24 tokens a run."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch

from tests.helpers import load_pair, profile, run_all
from playground import models, trace
from playground.trace import sametext
from playground.kernels import ops as kernel_ops
from playground.bench import prompts as bench_prompts
from playground.core.progress import printer
from playground.run.runner import Runner, encode_prompt, new_tokens
from playground.core.config import DecodeConfig, KPolicy
from playground.core.treeshape import parse_tree
from playground.run.spec import DrafterSpec, PairSpec, RunSpec

pytestmark = pytest.mark.real_model

PROMPT = "Write a Python function that returns the n-th Fibonacci number."


def hardware_precision():
    """What this device runs by default (conftest pins fp32 for the tiny models: not here)."""
    saved = os.environ.pop("PLAYGROUND_DTYPE", None)
    try:
        return models.default_target_precision()
    finally:
        if saved is not None:
            os.environ["PLAYGROUND_DTYPE"] = saved


@pytest.fixture(scope="module")
def real():
    catalog = models.get_pair(models.DEFAULT_PAIR)
    pair = PairSpec(catalog.name, catalog.target, catalog.draft, target_precision=hardware_precision())
    runner = Runner()
    spec = RunSpec(pair, DrafterSpec(), DecodeConfig(max_new_tokens=24, k=4, policy=KPolicy.FIXED), PROMPT)
    loaded = load_pair(runner, spec, printer())
    return runner, spec, loaded


def test_default_pair_runs_at_the_devices_default_precisions(real):
    _, _, loaded = real
    assert loaded.target_precision == hardware_precision()
    assert loaded.draft_precision == models.default_draft_precision()
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[loaded.target_precision.value]
    assert loaded.target.dtype == dtype


def test_default_pair_is_lossless_against_the_target_alone_and_hf_generate(real):
    runner, spec, loaded = real
    for policy in (KPolicy.FIXED, KPolicy.THEORY):
        s = spec.with_decode(policy=policy)
        rounds, base = run_all(runner, s), run_all(runner, s.baseline())
        verdict = sametext.compare_outputs(rounds, base, loaded.target_precision.value)
        # exact on the batch-invariant kernels (they allow no near-tie); on torch's bf16 kernels (a CPU without them,
        # PLAYGROUND_KERNELS=off) identical, or a near-tie flip the comparison names (docs/exactness.md)
        assert verdict["equal"] or (not loaded.invariant and verdict["near_tie"]), (policy, verdict)
    ids = encode_prompt(loaded.tokenizer, PROMPT)
    with torch.inference_mode():
        ref = loaded.target.generate(
            ids, do_sample=False, max_new_tokens=24, pad_token_id=loaded.tokenizer.eos_token_id
        )
    assert new_tokens(base) == ref[0, ids.shape[1] :].tolist()  # the baseline is HF's own greedy decoding
    summary = trace.summarize(rounds, base, profile(runner, spec))
    assert summary["alpha"] > 0.3  # a real same-family pair agrees often on code
    text = loaded.tokenizer.decode(new_tokens(rounds))
    assert "def" in text or "fib" in text.lower(), text


def test_default_pair_is_exact_where_stock_bf16_flips_a_near_tie(real):
    """The benchmark's code prompt at 64 tokens: with torch's stock bf16 kernels the speculative run and the
    target alone part at token 62 (a near-tie, top-2 gap 0.000 in the 5-token pass; PLAYGROUND_INVARIANT=0 makes
    this test fail there). With the batch-invariant kernels: the same tokens as the target alone and HF generate."""
    runner, spec, loaded = real
    if loaded.target_precision.value == "bf16" and not loaded.invariant:  # the claim is the kernels'
        pytest.skip(
            f"batch-invariant kernels unavailable: {kernel_ops.why_not()} (torch's bf16 kernels may flip this near-tie)"
        )
    s = replace(spec.with_decode(max_new_tokens=64), prompt=bench_prompts.PROMPTS["code"])
    rounds, base = run_all(runner, s), run_all(runner, s.baseline())
    verdict = sametext.compare_outputs(rounds, base, loaded.target_precision.value, exact=loaded.invariant)
    assert verdict["equal"], verdict
    ids = encode_prompt(loaded.tokenizer, s.prompt)
    with torch.inference_mode():
        ref = loaded.target.generate(
            ids, do_sample=False, max_new_tokens=64, pad_token_id=loaded.tokenizer.eos_token_id
        )
    assert new_tokens(base) == ref[0, ids.shape[1] :].tolist()


def test_the_confidence_shaped_tree_is_lossless_on_the_real_pair(real):
    """Issue 54: a confidence-shaped tree (verified in one call of the lean forward where the kernels run) keeps
    the target alone's tokens, on the summarisation prompt (whether a round branches depends on the costs measured
    in the run, so only the tokens are checked)."""
    runner, spec, loaded = real
    tree = spec.with_decode(policy=KPolicy.FIXED, k=8, tree=parse_tree("confidence:16"))
    s = replace(tree, prompt=bench_prompts.PROMPTS["summarisation"])
    rounds, base = run_all(runner, s), run_all(runner, s.baseline())
    verdict = sametext.compare_outputs(rounds, base, loaded.target_precision.value, exact=loaded.invariant)
    assert verdict["equal"] or (not loaded.invariant and verdict["near_tie"]), verdict


def test_default_pair_tokenizers_match(real):
    _, _, loaded = real
    assert loaded.draft.config.vocab_size == loaded.target.config.vocab_size
    assert loaded.target.config.num_hidden_layers > loaded.draft.config.num_hidden_layers
