"""Token HTML: one span per token, its class saying what happened to it (from real runs on the tiny
pair), tooltips with p, q, min(1, q/p) and u, everything escaped, colour plus a non-colour cue."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.helpers import run_all
from playground.core.records import CrossExtras, RoundRecord
from playground.core.config import DrafterKind
from playground.views import tokens
from playground.views.text import escape_text, num

CSS = (Path(__file__).resolve().parents[2] / "assets" / "style.css").read_text()
PROMPT = "Once upon a time"


class Spans(HTMLParser):
    """Collects every start tag and, per token span, [kind, title, text]."""

    def __init__(self):
        super().__init__()
        self.tags, self.tokens, self._stack = [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "span" and "data-kind" in attrs:
            self.tokens.append([attrs["data-kind"], attrs["title"], ""])
            self._stack.append(self.tokens[-1])
        else:
            self._stack.append(None)

    def handle_endtag(self, tag):
        self._stack.pop()

    def handle_data(self, data):
        for item in self._stack:
            if item is not None:
                item[2] += data


def parse(markup: str) -> Spans:
    parser = Spans()
    parser.feed(markup)
    return parser


def plain(i: int, token: int) -> RoundRecord:
    """A target-alone round that appended `token`."""
    return RoundRecord(
        round=i,
        k=0,
        draft_tokens=[],
        accepted=0,
        token=token,
        token_kind="target",
        new_tokens=[token],
        draft_s=0.0,
        verify_s=0.0,
        total_new=i + 1,
    )


@pytest.fixture(scope="module")
def greedy(runner, tiny_spec) -> list[RoundRecord]:
    return run_all(runner, tiny_spec(PROMPT, max_new_tokens=40, k=4))


@pytest.fixture(scope="module")
def sampled(runner, tiny_spec) -> list[RoundRecord]:
    return run_all(runner, tiny_spec(PROMPT, max_new_tokens=40, k=4, temperature=1.0, seed=3))


def expected_kinds(r: RoundRecord) -> list[str]:
    """What a round shows, in reading order: the kept drafts, the rejected one and the never evaluated
    ones where they were proposed, then the target's own token (when the budget left room for it)."""
    kept = min(r.accepted, len(r.new_tokens))
    kinds = ["accepted"] * kept
    if r.accepted < r.k and kept == r.accepted:
        kinds += ["rejected"] + ["unevaluated"] * (r.k - r.accepted - 1)
    if len(r.new_tokens) > kept:
        kinds.append(r.token_kind)
    return kinds


def test_each_round_reads_kept_then_rejected_then_unevaluated_then_the_targets_token(greedy, tiny_pair):
    context: list[int] = []
    for r in greedy:
        shown = parse(tokens.round_spans(r, tiny_pair.tokenizer, context)).tokens
        assert [kind for kind, _, _ in shown] == expected_kinds(r)
    assert context == [t for r in greedy for t in r.new_tokens]  # the context grew by the output, nothing else


def test_a_greedy_run_on_the_noisy_draft_shows_rejections_and_corrections(greedy, tiny_pair):
    kinds = [kind for kind, _, _ in parse(tokens.render_rounds(greedy, tiny_pair.tokenizer)).tokens]
    assert kinds.count("accepted") == sum(min(r.accepted, len(r.new_tokens)) for r in greedy)
    assert kinds.count("rejected") == sum(r.accepted < r.k for r in greedy)
    assert "rejected" in kinds
    assert "correction" in kinds


def test_greedy_tooltips_show_p_q_and_the_ratio_but_no_draw(greedy, tiny_pair):
    spans = parse(tokens.render_rounds(greedy, tiny_pair.tokenizer)).tokens
    title = next(t for kind, t, _ in spans if kind == "accepted")
    assert "p (draft) = " in title
    assert "q (target) = " in title
    assert "min(1, q/p) = " in title
    assert "u = " not in title  # greedy has no uniform draws


def test_sampled_tooltips_show_the_draw_and_the_verdict(sampled, tiny_pair):
    spans = parse(tokens.render_rounds(sampled, tiny_pair.tokenizer)).tokens
    rejected = [t for kind, t, _ in spans if kind == "rejected"]
    accepted = [t for kind, t, _ in spans if kind == "accepted"]
    assert rejected
    assert all("u = " in t and "reject: u >= min(1, q/p)" in t for t in rejected)
    assert any("accept: u < min(1, q/p)" in t for t in accepted)
    ratios = [float(m) for _, t, _ in spans for m in re.findall(r"min\(1, q/p\) = ([0-9.]+)", t)]
    assert ratios
    assert all(0 <= v <= 1 for v in ratios)


def test_target_alone_tokens_are_marked_target(runner, tiny_spec, tiny_pair):
    rounds = run_all(runner, tiny_spec(PROMPT, DrafterKind.TARGET_ALONE, max_new_tokens=12))
    spans = parse(tokens.render_rounds(rounds, tiny_pair.tokenizer)).tokens
    assert rounds
    assert [kind for kind, _, _ in spans] == ["target"] * sum(len(r.new_tokens) for r in rounds)


def test_span_text_adds_up_to_the_decoded_text(tiny_pair):
    tok = tiny_pair.tokenizer
    text = "Once upon a time there was a little fox.\nfor i in range(10):\n    print(i)"
    ids = tok(text, add_special_tokens=False).input_ids
    markup = tokens.render_rounds([plain(i, t) for i, t in enumerate(ids)], tok)
    shown = "".join(t[2] for t in parse(markup).tokens).replace("↵", "")
    assert shown == tok.decode(ids)
    assert tokens.plain_text([plain(i, t) for i, t in enumerate(ids)], tok) == tok.decode(ids)


def test_newlines_stay_visible_and_real():
    assert escape_text("a\nb") == 'a<span class="tok-nl">↵</span>\nb'


@pytest.mark.parametrize("text, escaped", [("<&>", "&lt;&amp;&gt;"), ("\"'", "&quot;&#x27;")])
def test_token_text_is_escaped(text, escaped):
    assert escape_text(text) == escaped


def test_model_and_prompt_text_cannot_inject_markup(tiny_pair):
    tok = tiny_pair.tokenizer
    evil = '<script>alert(1)</script><img src=x onerror="alert(2)">'
    ids = tok(evil, add_special_tokens=False).input_ids
    half = len(ids) // 2
    record = RoundRecord(
        round=0,
        k=half + 1,
        draft_tokens=ids[: half + 1],
        accepted=half,
        token=ids[half],
        token_kind="correction",
        new_tokens=ids[: half + 1],
        draft_s=0.0,
        verify_s=0.0,
        total_new=half + 1,
        p=[0.5] * (half + 1),
        q=[0.25] * (half + 1),
    )
    rest = [plain(1 + i, t) for i, t in enumerate(ids[half + 1 :])]
    markup = tokens.render_rounds([record] + rest, tok, prompt=evil)
    assert {tag for tag, _ in parse(markup).tags} == {"div", "span"}
    assert "<script" not in markup
    assert "<img" not in markup
    output = "".join(text for kind, _, text in parse(markup).tokens if kind not in ("rejected", "unevaluated"))
    assert output == evil
    assert '<span class="tok-prompt" title="prompt">' + html.escape(evil) + "</span>" in markup


def test_hostile_title_cannot_break_the_attribute():
    span = tokens.token_span(
        "accepted", 7, '"><script>x</script>', tokens.tooltip("accepted", 7, '" onmouseover="x', 0.5, 0.4)
    )
    parsed = parse(span)
    assert [tag for tag, _ in parsed.tags] == ["span"]
    assert "onmouseover" not in parsed.tags[0][1]
    assert parsed.tokens[0][2] == '"><script>x</script>'


def test_missing_numbers_read_n_a():
    assert num(float("nan")) == "n/a"
    assert num(None) == "n/a"
    assert num(0.25) == "0.250"


@pytest.mark.parametrize(
    "kind, colour", [("accepted", "#009E73"), ("rejected", "#D55E00"), ("correction", "#0072B2"), ("bonus", "#E69F00")]
)
def test_palette_is_okabe_ito_in_python_and_css(kind, colour):
    assert tokens.COLORS[kind] == colour
    assert f"--tok-{kind}: {colour}" in CSS
    assert f".tok-{kind}" in CSS


def css_rule(kind: str) -> str:
    rules = {m.group(1): m.group(2) for m in re.finditer(r"\.tok-(\w+) \{([^}]*)\}", CSS)}
    return rules[kind]


def test_rejected_token_is_struck_through():
    assert "line-through" in css_rule("rejected")


def test_unevaluated_token_is_struck_through_and_faded():
    assert "line-through" in css_rule("unevaluated")
    assert "opacity" in css_rule("unevaluated")


def test_bonus_is_underlined_and_correction_boxed():
    assert "underline" in css_rule("bonus")
    assert "outline" in css_rule("correction")


def test_css_has_a_dark_mode_and_keeps_whitespace():
    assert ".dark" in CSS
    assert "pre-wrap" in CSS


def test_legend_shows_a_sample_of_every_kind():
    classes = [attrs.get("class", "") for _, attrs in parse(tokens.legend()).tags]
    for kind in ("accepted", "rejected", "unevaluated", "correction", "bonus", "target"):
        assert f"tok tok-{kind}" in classes


def test_empty_output_escapes_its_message():
    assert tokens.empty_output("<b>") == '<div class="tok-output tok-empty">&lt;b&gt;</div>'


def test_a_cross_tokenizer_round_shows_the_draft_side_on_hover(tiny_pair):
    tok = tiny_pair.tokenizer
    record = RoundRecord(
        round=0,
        k=2,
        draft_tokens=[5, 6],
        accepted=1,
        token=7,
        token_kind="correction",
        new_tokens=[5, 7],
        draft_s=0.0,
        verify_s=0.0,
        total_new=2,
        extras=CrossExtras(text=" a <b>fox", pieces=[" a", " <b>fox"], source=[" a", " <b>fox"]),
    )
    spans = parse(tokens.round_spans(record, tok, []))
    kinds = [kind for kind, _, _ in spans.tokens]
    assert kinds == ["accepted", "rejected", "correction"]
    accepted, rejected, correction = (title for _, title, _ in spans.tokens)
    assert "draft side (its own tokenizer): ' a'" in accepted and "' a <b>fox'" in accepted
    assert "draft side (its own tokenizer): ' <b>fox'" in rejected
    assert "draft side" not in correction  # the target's own token has no draft side
    assert "<b>" not in tokens.round_spans(record, tok, []).replace("&lt;b&gt;", "")  # escaped in the title
