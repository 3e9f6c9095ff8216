"""A draft's LM head over part of the vocabulary (decoding/vocab.py, FR-Spec): the subset it proposes from, greedy
output equal to the target alone's, and the sampling law kept (chi-square), with the rule broken on purpose caught."""

from __future__ import annotations

import pytest
import torch

from playground.decoding.model import ModelDrafter
from playground.decoding.vocab import SubsetHead, why_not
from playground.engine import SpeculativeDecoder
from playground.run.runner import encode_prompt
from playground.core.config import DecodeConfig
from tests.helpers import CHI2_999, PROMPTS, target_greedy, two_token_test

CHI_PROMPT = "Once upon a time there was a little"
CHI = dict(max_new_tokens=2, k=2, temperature=1.5, top_k=4)


def test_the_subset_is_the_frequent_ids_the_sequences_tokens_and_eos(tiny_pair):
    draft = tiny_pair.draft
    head = SubsetHead(draft, 40)
    ids = torch.tensor([[5, 300, 41, 7, 300, 250]])
    head.add(ids)
    hidden = torch.randn(draft.config.hidden_size)
    logits = head.full_logits(hidden)
    eos = draft.generation_config.eos_token_id
    eos = {eos} if isinstance(eos, int) else set(eos)
    finite = set(torch.isfinite(logits).nonzero().flatten().tolist())
    assert finite == set(range(40)) | {300, 41, 250} | {t for t in eos if t >= 40}
    full = draft.lm_head(hidden.view(1, -1))[0]
    keep = sorted(finite)
    torch.testing.assert_close(logits[keep], full[keep].float(), rtol=1e-4, atol=1e-4)  # the same rows, other blocking
    head.reset()
    assert set(torch.isfinite(head.full_logits(hidden)).nonzero().flatten().tolist()) == set(range(40)) | {
        t for t in eos if t >= 40
    }


def test_a_subset_must_be_smaller_than_the_vocabulary(tiny_pair):
    vocab = tiny_pair.draft.lm_head.weight.shape[0]
    assert why_not(tiny_pair.draft, vocab) and why_not(tiny_pair.draft, 0)
    with pytest.raises(ValueError):
        SubsetHead(tiny_pair.draft, vocab)


@pytest.mark.parametrize("size", [16, 200])
def test_greedy_output_is_the_targets_own(tiny_pair, size):
    accepted = 0
    for prompt in PROMPTS:
        ids = encode_prompt(tiny_pair.tokenizer, prompt)
        dec = SpeculativeDecoder(
            tiny_pair.target,
            ModelDrafter(tiny_pair.draft, vocab=size),
            ids,
            DecodeConfig(max_new_tokens=24, k=4),
            tiny_pair.eos,
        )
        rounds = list(dec)
        assert dec.new_tokens == target_greedy(tiny_pair.target, ids, 24, tiny_pair.eos), (prompt, size)
        accepted += sum(r.accepted for r in rounds)
    assert accepted > 0  # the subset still drafts what the target keeps


class FullPDrafter(ModelDrafter):
    """Broken on purpose: proposes from the subset but hands the rule the whole head's p."""

    def propose(self, ids, k, params, generator):
        draft = super().propose(ids, k, params, generator)
        if draft.logits is not None and len(draft.tokens):
            feed = ids if len(draft.tokens) == 1 else torch.cat([ids, draft.tokens[:-1].view(1, -1)], 1)
            with torch.inference_mode():
                full = self.model(input_ids=feed).logits[0, -len(draft.tokens) :]
            draft.logits = full.float()
        return draft


def chi_square_of(pair, drafter_class, size: int) -> tuple[float, int, float]:
    ids = encode_prompt(pair.tokenizer, CHI_PROMPT)
    seen = {"accepted": 0, "drafted": 0}

    def count(seed, r):
        seen["accepted"] += r.accepted
        seen["drafted"] += r.k

    stat, df = two_token_test(pair, lambda: drafter_class(pair.draft, vocab=size), ids, 2000, count, **CHI)
    return stat, df, seen["accepted"] / max(1, seen["drafted"])


def outside_mass(pair, size: int) -> float:
    """The draft's top-4 mass (at the test's temperature) on tokens its subset leaves out, after the prompt."""
    ids = encode_prompt(pair.tokenizer, CHI_PROMPT)
    with torch.inference_mode():
        logits = pair.draft(input_ids=ids).logits[0, -1].float() / CHI["temperature"]
    top = logits.topk(CHI["top_k"])
    probs = torch.softmax(top.values, -1)
    inside = set(range(size)) | set(ids[0].tolist())
    return sum(p for p, t in zip(probs.tolist(), top.indices.tolist()) if t not in inside)


SIZE = 120  # leaves a good share of the tiny draft's likely next tokens out of the subset (checked below)


def test_sampling_keeps_the_target_distribution(tiny_pair):
    assert outside_mass(tiny_pair, SIZE) > 0.2  # the subset matters here
    stat, df, alpha = chi_square_of(tiny_pair, ModelDrafter, SIZE)
    assert stat < CHI2_999[df], (stat, df)
    assert 0.1 < alpha < 0.95, alpha


def test_the_same_test_catches_the_whole_heads_p_handed_to_the_rule(tiny_pair):
    stat, df, _ = chi_square_of(tiny_pair, FullPDrafter, SIZE)
    assert stat > CHI2_999[df], (stat, df)


def test_the_spec_names_it_and_bad_sizes_are_refused(tiny_pair):
    from playground.decoding import make_drafter
    from playground.core.errors import PlaygroundError
    from playground.run.spec import DrafterSpec, parse_drafter_name
    from playground.core.treeshape import parse_tree

    spec = parse_drafter_name("draft model:fp32,vocab=256")
    assert spec.options.draft_vocab == 256 and spec.label == "draft model (fp32, 256 tokens)"
    assert make_drafter(spec, tiny_pair).head.size == 256
    with pytest.raises(PlaygroundError, match="from 256 to"):
        parse_drafter_name("draft model:vocab=12")
    with pytest.raises(PlaygroundError, match="does not apply"):  # the tiny vocabulary is smaller
        make_drafter(DrafterSpec.of(draft_vocab=100_000), tiny_pair)
    with pytest.raises(PlaygroundError, match="chains only"):
        make_drafter(DrafterSpec.of(draft_vocab=256), tiny_pair, tree=parse_tree("2-1"))
