"""Shared controls: picking a pair picks the drafter its draft model needs."""

from playground import models
from playground.config import DrafterKind
from playground.ui.common import pair_drafter

DRAFT, CROSS = DrafterKind.DRAFT_MODEL.value, DrafterKind.CROSS_TOKENIZER.value


def test_a_cross_tokenizer_pair_switches_the_draft_model_drafter_and_back():
    cross = next(p.name for p in models.pairs().values() if p.cross_tokenizer)
    same = models.DEFAULT_PAIR
    assert pair_drafter(cross, DRAFT) == CROSS
    assert pair_drafter(same, CROSS) == DRAFT
    assert pair_drafter(same, DRAFT) == DRAFT


def test_draft_free_drafters_and_unknown_pairs_leave_the_drafter_alone():
    cross = next(p.name for p in models.pairs().values() if p.cross_tokenizer)
    assert pair_drafter(cross, DrafterKind.PROMPT_LOOKUP.value) == DrafterKind.PROMPT_LOOKUP.value
    assert pair_drafter("<no such pair>", DRAFT) == DRAFT
