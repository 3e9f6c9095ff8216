"""The bench's HF peer (bench/hf.py) runs what the registry builds for our strategy (decoding.hf_generate, the
export's too) on the pair's own objects, sets k, the schedule and the threshold on the drafting model's
generation_config for the call only. Stand-ins for the pair record what generate is called with; the tiny models'
runs are tests/bench/test_grid.py's."""

from __future__ import annotations

import types

import pytest
import torch

from playground import decoding
from playground.bench import hf
from playground.core.config import DecodeConfig, KPolicy
from playground.run.spec import DrafterSpec, options_of

PLAIN = {"max_new_tokens", "eos_token_id", "pad_token_id", "do_sample", "temperature", "top_p", "top_k"}
DEFAULTS = {
    "num_assistant_tokens": 20,
    "num_assistant_tokens_schedule": "constant",
    "assistant_confidence_threshold": 0.4,
}


class Tokenizer:
    chat_template, pad_token_id = None, 0

    def __call__(self, prompt, **kw):
        return types.SimpleNamespace(input_ids=torch.tensor([[1, 2, 3]]))


def stand_in_pair() -> tuple[types.SimpleNamespace, list[dict]]:
    """A pair whose target's generate records its arguments and the draft's generation_config during the call."""
    calls: list[dict] = []
    draft = types.SimpleNamespace(generation_config=types.SimpleNamespace(**DEFAULTS))

    def generate(ids, attention_mask, **kwargs):
        calls.append({"kwargs": kwargs, "draft": dict(vars(draft.generation_config))})
        return torch.tensor([[1, 2, 3, 4]])

    target = types.SimpleNamespace(device=torch.device("cpu"), generate=generate)
    pair = types.SimpleNamespace(
        target=target, draft=draft, tokenizer=Tokenizer(), draft_tokenizer=Tokenizer(), eos={0}
    )
    return pair, calls


@pytest.mark.parametrize("policy", list(KPolicy))
@pytest.mark.parametrize("kind", [kind for kind, s in decoding.REGISTRY.items() if s.hf.bench])
def test_each_benched_strategys_hf_peer_runs_what_the_registry_builds(kind, policy):
    drafter = DrafterSpec(kind, options_of(kind, {"max_ngram": 2}))
    decode = DecodeConfig(k=5, policy=policy, confidence=0.3)
    built = decoding.hf_generate(kind, drafter.options, decode.k)
    configs = hf.configs_for(drafter, decode, "fp32")
    assert bool(configs) == bool(built.arguments)  # none where transformers runs the target alone: the grid's own row
    for config in configs:
        pair, calls = stand_in_pair()
        objects = {
            decoding.HFObject.DRAFT: pair.draft,
            decoding.HFObject.TARGET: pair.target,
            decoding.HFObject.TOKENIZER: pair.tokenizer,
            decoding.HFObject.DRAFT_TOKENIZER: pair.draft_tokenizer,
        }
        tokens, _ = hf.generate(pair, config, "Hello", decode)
        (call,) = calls
        assert tokens == [4] and config.drafter is kind
        sent = {name: value for name, value in call["kwargs"].items() if name not in PLAIN}
        assert sent == {n: objects[v] if isinstance(v, decoding.HFObject) else v for n, v in built.arguments.items()}
        drafts = built.drafts is decoding.HFObject.DRAFT
        ours = (decode.k, config.schedule, decode.confidence if config.method == hf.HF_CONFIDENCE else 0.0)
        settings = dict(zip(hf.ASSISTANT_FIELDS, ours if config.k is not None else (None,) * 3))  # k None: HF's own
        assert call["draft"] == (settings if drafts else DEFAULTS)
        assert vars(pair.draft.generation_config) == DEFAULTS  # put back


def test_the_hf_peer_of_a_strategy_with_no_transformers_peer_in_the_bench_is_none():
    for kind, s in decoding.REGISTRY.items():
        if not s.hf.bench:
            assert hf.configs_for(DrafterSpec(kind, options_of(kind, {"exit_layer": 3})), DecodeConfig()) == []
