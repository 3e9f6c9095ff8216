"""The draft-free strategies' views (playground/views/draftfree.py): each kept draft says where it came from (a
data-source the CSS underlines, a tooltip line), the legend lists the sources a run used, the summary counts them
(trace.kept_by_source), and a round is explained in words; model text escaped. Synthetic records, no models."""

from __future__ import annotations

import re
from pathlib import Path

from playground import trace
from playground.core.records import LookaheadExtras, RoundRecord, SuffixExtras, TreeExtras
from playground.views import draftfree, tokens
from tests.helpers import Hostile, Words

CSS = (Path(__file__).resolve().parents[2] / "assets" / "style.css").read_text()


def record(k: int, accepted: int, extras, token: int = 4) -> RoundRecord:
    kept = [1, 2, 3, 4, 5][:accepted]
    return RoundRecord(
        round=0,
        k=k,
        draft_tokens=[1, 2, 3, 4, 5][:k],
        accepted=accepted,
        token=token,
        token_kind="correction" if accepted < k else "bonus",
        new_tokens=kept + [token],
        draft_s=0.0,
        verify_s=0.1,
        total_new=accepted + 1,
        p=[1.0] * k,
        q=[0.5] * k,
        extras=extras,
    )


def suffix_round(store: str = "this run") -> RoundRecord:
    return record(3, 2, SuffixExtras(match=4, store=store, score=1.5, prob=[0.8, 0.5, 0.2], count=[8, 5, 2]))


def lookahead_round() -> RoundRecord:
    x = LookaheadExtras(
        parents=[-1, 0, -1],
        path=[0, 1],
        source=["window", "sequence", "window"],
        collected=[2, -1, 0],
        window=[[1, 2], [3, 4, 5]],
        ngrams=3,
        pool=7,
        width=8,
    )
    return record(3, 2, x)


def test_a_kept_suffix_draft_says_which_store_and_how_often_it_was_seen():
    r = suffix_round("session memory")
    slug, note = draftfree.origin(r, 1)
    assert slug == "memory" and "earlier runs" in note and "last 4 tokens" in note and "seen 5 times" in note
    assert draftfree.origin(r, 2) is None  # not kept
    html = tokens.round_spans(r, Words(), [])
    assert html.count('data-source="memory"') == 2  # the two kept drafts, not the correction
    assert 'tok-accepted[data-source="memory"]' in CSS  # and the CSS marks them


def test_a_kept_lookahead_draft_says_whether_the_window_or_the_prompt_made_its_ngram():
    r = lookahead_round()
    assert draftfree.kept_sources(r) == ["window", "sequence"]
    assert "Jacobi window" in draftfree.origin(r, 0)[1] and "round 3" in draftfree.origin(r, 0)[1]
    assert draftfree.origin(r, 1)[0] == "sequence" and "round" not in draftfree.origin(r, 1)[1]
    assert re.findall(r'data-source="(\w+)"', tokens.round_spans(r, Words(), [])) == ["window", "sequence"]


def test_other_strategies_rounds_carry_no_source():
    plain = record(3, 2, None)
    assert draftfree.kept_sources(plain) == [] and draftfree.origin(plain, 0) is None
    assert "data-source" not in tokens.round_spans(plain, Words(), [])
    assert draftfree.explain_html(plain, Words(), []) == "" and draftfree.legend([plain]) == ""
    assert trace.kept_by_source([plain, record(2, 1, TreeExtras([-1, 0], [0]))]) == {}


def test_the_legend_and_the_summary_count_the_sources_a_run_used():
    rounds = [suffix_round(), suffix_round("session memory"), suffix_round()]
    assert trace.kept_by_source(rounds) == {"this run": 4, "session memory": 2}
    legend = draftfree.legend(rounds)
    assert legend.index('data-source="run"') < legend.index('data-source="memory"') and "window" not in legend


def test_a_suffix_round_is_explained_with_its_match_and_estimates():
    text = draftfree.explain_html(suffix_round(), Words(), [])
    assert "last <b>4</b> tokens" in text and "a chain of 3 tokens" in text and "<b>1.50</b>" in text
    assert text.count("<tr>") == 4 and text.count("not kept") == 1  # a header and three drafts
    nothing = record(0, 0, SuffixExtras())
    assert "no match" in draftfree.explain_html(nothing, Words(), [])


def test_a_lookahead_round_shows_its_window_and_where_each_candidate_came_from():
    text = draftfree.explain_html(lookahead_round(), Words(), [])
    assert "level 0" in text and "level 1" in text and "<b>3</b> n-grams" in text and "<b>7</b>" in text
    assert "a tree of 3 nodes" in text and "(round 3)" in text and "prompt pool" in text
    assert "<code> the cat</code>" in text  # level 0's guesses as text


def test_model_text_is_escaped():
    for r in (suffix_round(), lookahead_round()):
        text = draftfree.explain_html(r, Hostile(), [])
        assert "&lt;b&gt;&amp;" in text and "<b>&" not in text
