"""Token HTML: classes per kind from real engine runs on the tiny pair, tooltips, escaping."""
from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from playground import render, session
from playground.engine import DecodeConfig, RoundRecord

CSS = (Path(__file__).resolve().parent.parent / "assets" / "style.css").read_text()


class Spans(HTMLParser):
    """Collects every start tag and, per token span, (kind, title, text)."""

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


def run(pair, kind=session.DRAFT_MODEL, prompt="Once upon a time", **cfg) -> list[RoundRecord]:
    return list(session.decoder(pair, kind, prompt, DecodeConfig(**{"max_new_tokens": 40, "k": 4, **cfg})))


def test_greedy_run_kinds_match_records(tiny_pair):
    rounds = run(tiny_pair)
    spans = parse(render.render_rounds(rounds, tiny_pair.tokenizer)).tokens
    kinds = [k for k, _, _ in spans]
    kept = sum(min(r.accepted, len(r.new_tokens)) for r in rounds)
    assert kinds.count("accepted") == kept
    assert kinds.count("rejected") == sum(r.accepted < r.k for r in rounds)
    assert kinds.count("unevaluated") == sum(max(0, r.k - r.accepted - 1) for r in rounds)
    assert kinds.count("correction") == sum(r.token_kind == "correction" and len(r.new_tokens) > r.accepted for r in rounds)
    assert kinds.count("bonus") == sum(r.token_kind == "bonus" and len(r.new_tokens) > r.accepted for r in rounds)
    assert kinds.count("target") == sum(r.k == 0 for r in rounds)  # a round the budget cut to k = 0
    assert {"accepted", "rejected", "correction"} <= set(kinds)  # the noisy draft disagrees sometimes
    # reading order inside a round: kept drafts, the rejected one, the not evaluated ones, the correction
    first = rounds[0]
    n = first.accepted
    head = kinds[: first.k + 1]
    if n < first.k:
        assert head == ["accepted"] * n + ["rejected"] + ["unevaluated"] * (first.k - n - 1) + ["correction"]
    else:
        assert head == ["accepted"] * first.k + ["bonus"]


def test_tooltips_show_p_q_ratio_and_u(tiny_pair):
    greedy = parse(render.render_rounds(run(tiny_pair), tiny_pair.tokenizer)).tokens
    accepted = next(t for t in greedy if t[0] == "accepted")[1]
    assert "p (draft) = " in accepted and "q (target) = " in accepted and "min(1, q/p) = " in accepted
    assert "u = " not in accepted  # greedy has no uniform draws
    sampled = parse(render.render_rounds(run(tiny_pair, temperature=1.0, seed=3), tiny_pair.tokenizer)).tokens
    rejected = [t for t in sampled if t[0] == "rejected"]
    assert rejected and all("u = " in t[1] and "reject" in t[1] for t in rejected)
    assert any("u = " in t[1] for t in sampled if t[0] == "accepted")
    values = [float(m) for t in sampled for m in re.findall(r"min\(1, q/p\) = ([0-9.]+)", t[1])]
    assert values and all(0 <= v <= 1 for v in values)


def test_target_alone_tokens_are_plain_and_text_matches(tiny_pair):
    rounds = run(tiny_pair, kind=session.TARGET_ALONE, max_new_tokens=12)
    spans = parse(render.render_rounds(rounds, tiny_pair.tokenizer)).tokens
    assert [k for k, _, _ in spans] == ["target"] * sum(len(r.new_tokens) for r in rounds)


def test_text_of_spans_is_the_decoded_text(tiny_pair):
    tok = tiny_pair.tokenizer
    text = "Once upon a time there was a little fox.\nfor i in range(10):\n    print(i)"
    ids = tok(text, add_special_tokens=False).input_ids
    records = [RoundRecord(round=i, k=0, draft_tokens=[], accepted=0, token=t, token_kind="target", new_tokens=[t],
                           draft_s=0.0, verify_s=0.0, total_new=i + 1) for i, t in enumerate(ids)]
    markup = render.render_rounds(records, tok)
    shown = "".join(t[2] for t in parse(markup).tokens).replace("↵", "")
    assert shown == tok.decode(ids)
    assert '<span class="tok-nl">↵</span>\n' in markup  # newlines stay visible and real


def test_everything_is_escaped(tiny_pair):
    tok = tiny_pair.tokenizer
    evil = '<script>alert(1)</script><img src=x onerror="alert(2)">'
    ids = tok(evil, add_special_tokens=False).input_ids
    half = len(ids) // 2
    record = RoundRecord(round=0, k=half + 1, draft_tokens=ids[: half + 1], accepted=half, token=ids[half],
                         token_kind="correction", new_tokens=ids[: half + 1], draft_s=0.0, verify_s=0.0,
                         total_new=half + 1, p=[0.5] * (half + 1), q=[0.25] * (half + 1))
    rest = [RoundRecord(round=1 + i, k=0, draft_tokens=[], accepted=0, token=t, token_kind="target", new_tokens=[t],
                        draft_s=0.0, verify_s=0.0, total_new=half + 2 + i) for i, t in enumerate(ids[half + 1:])]
    markup = render.render_rounds([record] + rest, tok, prompt=evil)
    tags = {tag for tag, _ in parse(markup).tags}
    assert tags <= {"div", "span"}
    assert "<script" not in markup and "<img" not in markup
    assert "&lt;script&gt;" in markup and "&lt;img" in markup
    text = "".join(t[2] for t in parse(markup).tokens if t[0] != "rejected" and t[0] != "unevaluated")
    assert text == evil
    assert '<span class="tok-prompt" title="prompt">' + html.escape(evil) + "</span>" in markup


def test_hostile_title_cannot_break_the_attribute():
    span = render.token_span("accepted", 7, '"><script>x</script>', render.tooltip("accepted", 7, '" onmouseover="x', 0.5, 0.4))
    parsed = parse(span)
    assert [t for t, _ in parsed.tags] == ["span"]
    assert "onmouseover" not in parsed.tags[0][1]


def test_palette_and_non_colour_cues_in_css():
    for kind, colour in [("accepted", "#009E73"), ("rejected", "#D55E00"), ("correction", "#0072B2"), ("bonus", "#E69F00")]:
        assert render.COLORS[kind] == colour
        assert f"--tok-{kind}: {colour}" in CSS
        assert f".tok-{kind}" in CSS
    rules = {m.group(1): m.group(2) for m in re.finditer(r"\.tok-(\w+) \{([^}]*)\}", CSS)}
    assert "line-through" in rules["rejected"] and "line-through" in rules["unevaluated"]
    assert "opacity" in rules["unevaluated"]
    assert "underline" in rules["bonus"] and "outline" in rules["correction"]
    assert ".dark" in CSS and "pre-wrap" in CSS


def test_legend_names_every_kind():
    spans = parse(render.legend()).tags
    classes = {a.get("class", "") for _, a in spans}
    for kind in render.KINDS:
        assert f"tok tok-{kind}" in classes


@pytest.mark.parametrize("text", ["\n", "a\nb", "<&>"])
def test_escape_text(text):
    out = render.escape_text(text)
    assert "<&>" not in out
    assert out.count("↵") == text.count("\n")
