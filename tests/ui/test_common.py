"""Shared controls: picking a pair picks the drafter its draft model needs; the sidebar shows a drafter's controls."""

import re
from pathlib import Path

from playground import decoding, models
from playground.core.config import DrafterKind, KPolicy
from playground.ui.common import pair_drafter

DRAFT, CROSS = DrafterKind.DRAFT_MODEL.value, DrafterKind.CROSS_TOKENIZER.value


def test_a_cross_tokenizer_pair_switches_the_draft_model_drafter_and_back():
    cross = next(p.name for p in models.pairs().values() if decoding.two_tokenizers(p.drafter))
    same = models.DEFAULT_PAIR
    assert pair_drafter(cross, DRAFT) == CROSS
    assert pair_drafter(same, CROSS) == DRAFT
    assert pair_drafter(same, DRAFT) == DRAFT


def test_draft_free_drafters_and_unknown_pairs_leave_the_drafter_alone():
    cross = next(p.name for p in models.pairs().values() if decoding.two_tokenizers(p.drafter))
    assert pair_drafter(cross, DrafterKind.PROMPT_LOOKUP.value) == DrafterKind.PROMPT_LOOKUP.value
    assert pair_drafter("<no such pair>", DRAFT) == DRAFT


def _css_rule(selector_end: str) -> str:
    """The selector of the rule in assets/style.css that ends with selector_end."""
    css = (Path(__file__).resolve().parents[2] / "assets" / "style.css").read_text()
    rules = [r.split("{")[0] for r in re.split(r"}\s*", css) if "{" in r]
    return next(r for r in rules if r.strip().endswith(selector_end))


def _values(selector: str, elem_id: str) -> set[str]:
    return set(re.findall(rf'#{elem_id} input\[value="([^"]+)"\]', selector))


def test_the_sidebars_css_hides_exactly_the_controls_a_drafter_does_not_use():
    """assets/style.css hides a drafter's controls by the radio's values (CSS alone, no event): every value it
    names is a drafter or a k policy, and each rule's drafters are those the registry says use the control."""
    picked = {k.value: decoding.strategy(k) for k in DrafterKind if decoding.strategy(k).pickable}
    shown_for = lambda elem_id: _values(_css_rule(f"#{elem_id}"), "drafter")
    for name in {w.name for s in picked.values() if not s.about for w in s.widgets}:  # the options in the open
        assert shown_for(name.replace("_", "-")) == {
            k for k, s in picked.items() if name in [w.name for w in s.widgets]
        }
    assert shown_for("exit-layer") == {k for k, s in picked.items() if s.model == "target"}
    assert shown_for("draftfree-options") == {k for k, s in picked.items() if s.about}  # its widgets are there
    assert shown_for("draft-precision") == {k for k, s in picked.items() if not s.draft_model}  # hidden for these
    assert _values(_css_rule("#confidence"), "adaptive") == {KPolicy.CONFIDENCE.label}


def test_a_rule_that_hides_a_control_names_one_drafter_per_has():
    """Gradio prefixes each part of a selector list with its own container's selector, inside :has() too: in
    `:not(:has(A, B))` the prefixed B never matches, so the control stayed hidden for B (self int4's and lookahead's
    options did)."""
    css = re.sub(
        r"/\*.*?\*/", "", (Path(__file__).resolve().parents[2] / "assets" / "style.css").read_text(), flags=re.S
    )
    rules = [r.split("{")[0].strip() for r in re.split(r"}\s*", css) if "{" in r]
    hiding = [r for r in rules if ":not(:has(" in r]
    assert len(hiding) >= 4 and [r for r in hiding if "," in r] == []
