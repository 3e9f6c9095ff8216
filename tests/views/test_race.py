"""The replay race: each token at the measured end of its round (the cumulative draft + verify seconds),
the pieces adding up to the output text, the finish times equal to the runs' engine times, and nothing a
user or the model typed becoming markup."""

from __future__ import annotations

import html
import json
import math
import re
from html.parser import HTMLParser

import pytest

from tests.helpers import run_all
from playground.core.records import RoundRecord
from playground.core.config import DrafterKind
from playground.views import race

HOSTILE = "</script><img src=x onerror=alert(1)>"


def rnd(i: int, k: int, accepted: int, new: list[int], draft_s: float, verify_s: float, stop: str = "") -> RoundRecord:
    kind = "target" if k == 0 else ("bonus" if accepted == k else "correction")
    return RoundRecord(
        i, k, list(new[:k]) + [0] * max(0, k - len(new)), accepted, new[-1], kind, new, draft_s, verify_s, 0, stop=stop
    )


class FakeTokenizer:
    """Token id -> a fixed text: enough for piece_text (which decodes a left context and the token)."""

    VOCAB = {1: "Once", 2: " upon", 3: " a", 4: HOSTILE, 5: ' & "quotes"', 6: "\nnew line", 7: " {prompt} ${x}"}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.VOCAB[i] for i in ids)


SPEC = [
    rnd(0, 3, 3, [1, 2, 3, 4], 0.03, 0.25),
    rnd(1, 3, 1, [5, 6], 0.02, 0.11),
    rnd(2, 0, 0, [7], 0.0, 0.09, stop="length"),
]
BASE = [rnd(i, 0, 0, [t], 0.0, 0.1 + 0.01 * i) for i, t in enumerate([1, 2, 3, 4, 5, 6, 7])]
BASE[-1].stop = "length"
SPEC_S = 0.03 + 0.25 + 0.02 + 0.11 + 0.0 + 0.09  # the engine time of each run: its rounds' draft + verify seconds
BASE_S = sum(0.1 + 0.01 * i for i in range(7))


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text_of: dict[str, str] = {}
        self._open: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        self._open.append(attrs.get("class") or "")

    def handle_endtag(self, tag):
        self._open.pop()

    def handle_data(self, data):
        if self._open:
            self.text_of.setdefault(self._open[-1], "")
            self.text_of[self._open[-1]] += data


def parse(markup: str) -> Tags:
    parser = Tags()
    parser.feed(markup)
    return parser


def test_each_token_appears_at_the_cumulative_seconds_of_the_round_that_produced_it():
    pieces = race.pieces(SPEC, FakeTokenizer())
    events = race.timeline(SPEC, pieces)
    ends = [0.03 + 0.25, 0.03 + 0.25 + 0.02 + 0.11, 0.03 + 0.25 + 0.02 + 0.11 + 0.0 + 0.09]  # by hand
    expected = [ends[0]] * 4 + [ends[1]] * 2 + [ends[2]]  # all tokens of a round at the end of that round
    assert len(events) == 7
    assert all(math.isclose(t, e) for (t, _), e in zip(events, expected))
    assert [p for _, p in events] == [FakeTokenizer.VOCAB[t] for r in SPEC for t in r.new_tokens]


def test_a_lane_finishes_at_its_runs_engine_time_and_ends_at_its_tokens_per_s():
    tok = FakeTokenizer()
    spec, base = race.lane("spec", SPEC, tok), race.lane("base", BASE, tok)
    for ln, seconds in ((spec, SPEC_S), (base, BASE_S)):
        assert math.isclose(ln.finish_s, seconds)
        assert ln.tokens_per_s == pytest.approx(7 / seconds)  # 7 tokens each
        assert len(ln.events) / ln.finish_s == pytest.approx(7 / seconds)  # the lane's clock and tokens
        assert f"{7 / seconds:.1f} tokens/s" in race.render(spec, base)
        assert ln.events[-1][0] == ln.finish_s
    base_ends = [sum(0.1 + 0.01 * j for j in range(i + 1)) for i in range(7)]  # one token per round
    assert all(math.isclose(t, e) for (t, _), e in zip(base.events, base_ends))


def test_the_pieces_must_match_the_output_tokens():
    with pytest.raises(ValueError, match="6 text pieces for 7 output tokens"):
        race.timeline(SPEC, ["x"] * 6)


def test_the_pieces_of_a_real_run_concatenate_to_its_output(runner, tiny_spec, tiny_pair):
    tok = tiny_pair.tokenizer
    for drafter in (DrafterKind.DRAFT_MODEL, DrafterKind.TARGET_ALONE):
        rounds = run_all(runner, tiny_spec("Once upon a time", drafter, max_new_tokens=40, k=4))
        ln = race.lane("x", rounds, tok)
        ids = [t for r in rounds for t in r.new_tokens]
        assert len(ln.events) == len(ids) == 40
        assert ln.text == tok.decode(ids, skip_special_tokens=False)
        assert [t for t, _ in ln.events] == sorted(t for t, _ in ln.events)  # time only moves forward
        assert math.isclose(ln.finish_s, sum(r.draft_s + r.verify_s for r in rounds))


def test_the_markup_shows_both_final_texts_the_finish_times_and_the_controls():
    tok = FakeTokenizer()
    markup = race.race_html(SPEC, BASE, tok, prompt="Tell me", spec_label="Speculative (draft model)")
    page = parse(markup)
    texts = [t for tag, a in page.tags for t in [a.get("class")] if t == "race-text"]
    assert len(texts) == 2
    spec_text = "".join(FakeTokenizer.VOCAB[t] for r in SPEC for t in r.new_tokens)
    base_text = "".join(FakeTokenizer.VOCAB[t] for r in BASE for t in r.new_tokens)
    lanes = markup.split('class="race-lane ')[1:]
    assert html.escape(spec_text) in lanes[0] and html.escape(base_text) in lanes[1]
    spec_s, base_s = SPEC_S, BASE_S
    assert f"finished in {spec_s:.2f} s · first" in lanes[0] and f"finished in {base_s:.2f} s<" in lanes[1]
    assert re.search(rf'class="race-time"[^>]*>{base_s:.2f} s<', lanes[1])  # this side's clock, stopped at its finish
    assert f"{7 / spec_s:.1f} tokens/s" in lanes[0]
    buttons = [(a.get("class"), a.get("data-speed")) for tag, a in page.tags if tag == "button"]
    assert ("race-btn race-replay", None) in buttons
    assert [s for c, s in buttons if "race-speed" in c] == ["1", "4"]  # 1x and a faster speed
    data = json.loads(next(a["data-race"] for tag, a in page.tags if "data-race" in a))
    assert [lane["text"] for lane in data["lanes"]] == [
        [p for _, p in race.lane("", r, tok).events] for r in (SPEC, BASE)
    ]
    assert data["lanes"][1]["t"] == [t for t, _ in race.lane("", BASE, tok).events]
    assert math.isclose(data["lanes"][0]["finish"], spec_s)


def test_a_hostile_prompt_and_token_text_stay_text():
    markup = race.race_html(SPEC, BASE, FakeTokenizer(), prompt=HOSTILE + " {prompt}", spec_label=HOSTILE)
    page = parse(markup)
    assert {tag for tag, _ in page.tags} <= {"div", "span", "button", "h4", "style"}
    assert "<img" not in markup and "</script" not in markup and "<script" not in markup
    raw = markup.split('data-race="', 1)[1].split('"', 1)[0]
    assert "<" not in raw and ">" not in raw and '"' not in raw  # the attribute cannot be left
    data = json.loads(html.unescape(raw))
    assert "<" not in html.unescape(raw)  # the JSON itself escapes < > & (\u003c ...)
    assert HOSTILE in data["lanes"][0]["text"] and HOSTILE in data["lanes"][1]["text"]
    assert page.text_of["race-prompt"] == (HOSTILE + " {prompt}") * 2  # shown once per lane, as text
    assert page.text_of["race-label"] == HOSTILE + "Target alone" and HOSTILE in page.text_of["race-text"]
    assert markup.count(html.escape(HOSTILE)) >= 4  # the label, two prompts, two texts, all escaped


def test_the_player_writes_text_only_as_text():
    js = race.PLAYER_JS
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "eval(" not in js
    assert "watch('value', setup)" in js  # re-wired when a new run's race arrives
