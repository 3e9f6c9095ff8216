"""Self int4 (decoding/self_quant.py): the target's own quantised copy drafts for it. Its options refuse bad values
by name; the command line reads its names; the copy shares the target's storage and leaves the target's weights and
outputs as they were; the model cache keeps it once per target and counts its bytes; greedy output is the target
alone's and HF generate's, for chains and trees. int4 tests skip while kernels.model.quantize_int4 is missing."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

from playground import models
from playground.trace import sametext
from playground.bench.hf import configs_for
from playground.core.config import DecodeConfig, DrafterKind, KPolicy
from playground.decoding import self_quant
from playground.decoding.strategies.self_quant import Options
from playground.core.errors import PlaygroundError
from playground.kernels import model as kernel_model
from playground.run.runner import encode_prompt, new_tokens
from playground.run.spec import DrafterSpec, PairSpec, RunSpec, parse_drafter_name
from playground.views.export_code import hf_generate_code, vllm_code, vllm_config
from tests.helpers import run_all, load_pair
from tests.kernel_support import require_kernels

PROMPTS = ["Once upon a time", "def fibonacci(n):"]


# ---------------------------------------------------------------- options and names (no model)


@pytest.mark.parametrize(
    "values, words",
    [
        (dict(self_bits=6), "must be 4 (int4"),
        (dict(self_bits=True), "must be 4 (int4"),
        (dict(self_bits=4.5), "must be 4 (int4"),
        (dict(self_group_size=48), "one of 32, 64, 128, 256, got 48"),
        (dict(self_group_size="32"), "group size"),
        (dict(self_head="yes"), "head must be true or false"),
        (dict(self_bits=8, self_head=False), "at 8 bits the LM head is always int8"),
    ],
)
def test_the_options_refuse_bad_values_naming_the_option(values, words):
    with pytest.raises(PlaygroundError, match=re.escape(words)):
        Options(**values)


def test_the_options_default_to_int4_in_groups_of_32_with_the_head_and_say_what_differs():
    assert Options() == Options(4, 32, True) and Options().label == "" and Options().drafts_in == "int4"
    assert Options(self_group_size=64, self_head=False).label == "groups of 64, head unquantised"
    assert Options(self_bits=8.0).self_bits == 8 and Options(self_bits=8).drafts_in == "int8"
    assert DrafterSpec.of("self int4", self_bits=8).label == "self int4 (8 bits: int8 per row)"


def test_the_command_line_reads_self_int4_and_its_options():
    assert parse_drafter_name("self int4") == DrafterSpec(DrafterKind.SELF_QUANT)
    assert parse_drafter_name("self int4:group=64,head=0") == DrafterSpec.of(
        "self int4", self_group_size=64, self_head=False
    )
    assert parse_drafter_name("self int8") == DrafterSpec.of("self int4", self_bits=8)
    assert parse_drafter_name("self int4:bits=8") == parse_drafter_name("self int8")
    assert parse_drafter_name("self int4:head") == DrafterSpec(DrafterKind.SELF_QUANT)
    for bad, words in [
        ("self int4:foo=1", "'foo' is not an option of self int4; use bits, group, head"),
        ("self int4:head=maybe", "head=0 to turn it off"),
        ("self int4:group=x", "group takes a number"),
        ("self int8:head=0", "always int8"),
    ]:
        with pytest.raises(PlaygroundError, match=re.escape(words)):
            parse_drafter_name(bad)


def test_no_peer_has_it_so_the_bench_runs_none_and_the_export_says_so():
    spec = RunSpec(
        PairSpec("p", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
        DrafterSpec(DrafterKind.SELF_QUANT),
        DecodeConfig(k=4, policy=KPolicy.FIXED),
        "Hello",
    )
    assert configs_for(spec.drafter, spec.decode) == []
    assert vllm_config(spec) is None
    for code in (hf_generate_code(spec), vllm_code(spec)):
        assert "self int4 (the target's own quantised copy drafts for it) has no" in code
    assert "assistant" not in hf_generate_code(spec)  # the target alone's generate


# ---------------------------------------------------------------- on the tiny bf16 target, with the kernels


@pytest.fixture(scope="module")
def bf16(tiny_models):
    require_kernels()
    pair = PairSpec("tiny bf16", str(tiny_models["target"]), str(tiny_models["draft"]), target_precision="bf16")

    def make(prompt: str = PROMPTS[0], drafter: DrafterSpec | None = None, **decode) -> RunSpec:
        d = drafter or DrafterSpec.of("self int4", self_bits=8)
        return RunSpec(
            pair, d, DecodeConfig(**{"max_new_tokens": 32, "policy": KPolicy.FIXED, **decode}), prompt, chat=False
        )

    return make


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=ids).logits


def test_the_copy_shares_the_targets_storage_and_leaves_the_target_as_it_was(runner, bf16):
    loaded = load_pair(runner, bf16())
    target = loaded.target
    ids = encode_prompt(loaded.tokenizer, PROMPTS[1], chat=False)
    before = {n: p.detach().clone() for n, p in target.named_parameters()}
    logits = _logits(target, ids)
    fresh = self_quant.shared_copy(target)
    embed = target.get_input_embeddings().weight
    assert fresh.get_input_embeddings().weight is not embed
    assert fresh.get_input_embeddings().weight.data_ptr() == embed.data_ptr()  # no bf16 copy of a weight
    assert self_quant.added_bytes(fresh, target) == 0
    kernel_model.quantize_int8(fresh)
    assert self_quant.added_bytes(fresh, target) == fresh._int8_bytes > 0
    copied = self_quant.quantised_copy(loaded, 8)
    assert copied is self_quant.quantised_copy(loaded, 8)  # made once per loaded target: the model cache keeps it
    after = dict(target.named_parameters())
    assert all(after[n].dtype is torch.bfloat16 and torch.equal(before[n], after[n]) for n in before)
    assert torch.equal(_logits(target, ids), logits)
    assert not torch.equal(_logits(copied, ids), logits)  # the copy's numbers are cheaper: its logits differ a little


def test_making_the_copy_says_what_it_adds(runner, bf16):
    loaded = load_pair(runner, bf16())
    outside = replace(loaded, target=self_quant.shared_copy(loaded.target))  # a target the cache does not hold
    said: list[str] = []
    copied = self_quant.quantised_copy(outside, 8, progress=lambda message, fraction: said.append(message))
    need = self_quant.estimate_bytes(loaded.target, 8, 32, True)
    assert said == [
        f"Quantising the target's own copy to int8 for self int4 (once per loaded target; it adds about "
        f"{need / 1e9:.2f} GB, counted in the model cache's budget)"
    ]
    assert copied._added_bytes == need + sum(  # the estimate leaves out the biases only
        p.bias.numel() * 2 for p in loaded.target.modules() if isinstance(p, torch.nn.Linear) and p.bias is not None
    )


def test_the_model_cache_counts_the_copy_and_evicts_it_with_its_target(runner, bf16):
    loaded = load_pair(runner, bf16())
    copied = self_quant.quantised_copy(loaded, 8)
    key = models.MODELS.key(loaded.target_spec, loaded.target_precision)
    assert models.MODELS._bytes[key + ("self int8",)] == copied._added_bytes > 0
    assert models.MODELS._family(key) == [key, key + ("self int8",)]


def test_without_the_kernels_it_says_why(tiny_models, runner):
    fp32 = RunSpec(
        PairSpec("tiny fp32", str(tiny_models["target"]), None, target_precision="fp32"),
        DrafterSpec.of("self int4", self_bits=8),
        DecodeConfig(max_new_tokens=8, policy=KPolicy.FIXED),
        PROMPTS[0],
        chat=False,
    )
    with pytest.raises(PlaygroundError, match="the CPU kernels, which cannot run it here: the model is float32"):
        run_all(runner, fp32)


def test_a_group_size_that_does_not_divide_the_layers_is_refused_clearly(runner, bf16):
    """The tiny target's Linears take 64 inputs: groups of 128 cannot cover them; the message says so and what to do."""
    with pytest.raises(PlaygroundError, match="cannot quantise this target in groups of 128: .*Choose another group"):
        self_quant.quantised_copy(load_pair(runner, bf16()), 4, group_size=128)


def _hf_greedy(loaded, prompt: str, n: int) -> list[int]:
    ids = encode_prompt(loaded.tokenizer, prompt, chat=False)
    with torch.inference_mode():
        out = loaded.target.generate(ids, do_sample=False, max_new_tokens=n, pad_token_id=loaded.tokenizer.eos_token_id)
    return out[0, ids.shape[1] :].tolist()


DECODES = [
    dict(k=4),
    dict(k=6, policy=KPolicy.CONFIDENCE),
    dict(tree="dynamic:6"),
    dict(tree="3-2-1-1"),
]
OPTIONS = [
    pytest.param(dict(self_bits=8), id="int8"),
    pytest.param(dict(), id="int4"),
    pytest.param(dict(self_group_size=64, self_head=False), id="int4-g64-bf16-head"),
]


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("decode", DECODES, ids=lambda d: str(d.get("tree") or d.get("policy") or d["k"]))
def test_greedy_output_is_the_target_alones_and_hf_generates(runner, bf16, options, decode):
    for prompt in PROMPTS:
        spec = bf16(prompt, DrafterSpec.of("self int4", **options), **decode)
        loaded = load_pair(runner, spec)
        rounds, base = run_all(runner, spec), run_all(runner, spec.baseline())
        assert loaded.invariant and loaded.target.dtype is torch.bfloat16
        assert sametext.compare_outputs(rounds, base, "bf16", exact=True)["equal"], (prompt, decode)
        assert new_tokens(base) == _hf_greedy(loaded, prompt, len(new_tokens(base)))
        assert sum(r.accepted for r in rounds) > 0  # the copy drafts what the target would say
