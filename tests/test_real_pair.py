"""The offline default pair on a fresh machine: packs assembled, verified, converted, loaded,
and speculative decoding equal to the target's own greedy generate. Short on purpose."""
from __future__ import annotations

import pytest
import torch

from playground import models, session, trace
from playground.engine import DecodeConfig


@pytest.fixture(scope="module")
def default_pair() -> models.LoadedPair:
    pair = models.get_pair(models.DEFAULT_PAIR)
    return models.load_pair(pair.draft, pair.target, models.print_progress)


def test_default_pair_greedy_equals_target_generate(default_pair):
    prompt = "Write a Python function that returns the n-th Fibonacci number."
    config = DecodeConfig(max_new_tokens=16, k=4)
    dec = session.decoder(default_pair, session.DRAFT_MODEL, prompt, config)
    rounds = list(dec)
    ids = session.encode_prompt(default_pair.tokenizer, prompt)
    with torch.inference_mode():
        ref = default_pair.target.generate(ids, do_sample=False, max_new_tokens=16,
                                           pad_token_id=default_pair.tokenizer.eos_token_id)
    assert dec.new_tokens == ref[0, ids.shape[1]:].tolist()
    summary = trace.summarize(rounds)
    assert summary["alpha"] > 0.3  # a real same-family pair agrees often on code
    text = default_pair.tokenizer.decode(dec.new_tokens)
    assert "def" in text or "fib" in text.lower(), text


def test_default_pair_tokenizers_match(default_pair):
    assert default_pair.draft.config.vocab_size == default_pair.target.config.vocab_size
    assert default_pair.target.config.num_hidden_layers > default_pair.draft.config.num_hidden_layers
