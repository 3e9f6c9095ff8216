"""Charts: the figures' trace data are the frame's numbers; an empty frame is fine."""
from __future__ import annotations

import math

import pytest

from playground import charts, session, trace
from playground.engine import DecodeConfig


@pytest.fixture(scope="module")
def rounds(tiny_pair):
    return list(session.decoder(tiny_pair, session.DRAFT_MODEL, "Once upon a time", DecodeConfig(max_new_tokens=40, k=4, adaptive=True)))


def test_acceptance_chart(rounds):
    df = trace.frame(rounds)
    fig = charts.acceptance_chart(df)
    bars, line = fig.data
    df = df[df["k"] > 0]  # a round cut to k = 0 by the token budget drafted nothing: no bar
    assert list(bars.x) == list(df["round"]) and list(bars.y) == pytest.approx(list(df["acceptance"]))
    assert line.y[-1] == pytest.approx(df["accepted"].sum() / df["k"].sum())
    assert line.y[0] == pytest.approx(df["acceptance"].iloc[0])


def test_latency_chart(rounds):
    df = trace.frame(rounds)
    fig = charts.latency_chart(df)
    draft, verify = fig.data
    assert list(draft.y) == pytest.approx(list(df["draft_s"] * 1000))
    assert list(verify.y) == pytest.approx(list(df["verify_s"] * 1000))
    assert fig.layout.barmode == "stack"


def test_histogram(rounds):
    df = trace.frame(rounds)
    (bars,) = charts.accepted_histogram(df).data
    assert list(bars.x) == list(range(int(df["k"].max()) + 1))
    df = df[df["k"] > 0]  # rounds that drafted something
    assert sum(bars.y) == len(df)
    for n, count in zip(bars.x, bars.y):
        assert count == (df["accepted"] == n).sum()


def test_position_chart(rounds):
    (bars,) = charts.position_chart(trace.frame(rounds)).data
    expected = trace.position_acceptance(rounds)
    assert list(bars.x) == list(range(1, len(expected) + 1))
    assert [None if math.isnan(e) else e for e in expected] == pytest.approx([None if math.isnan(v) else v for v in bars.y])


def test_empty_frame_is_fine():
    empty = trace.frame([])
    for fig in charts.all_charts(empty):
        assert len(fig.data) == 0
        assert fig.layout.annotations  # "No rounds yet"
        fig.to_json()


def test_target_alone_frame(tiny_pair):
    rounds = list(session.decoder(tiny_pair, session.TARGET_ALONE, "Once upon a time", DecodeConfig(max_new_tokens=6)))
    acc, lat, hist, pos = charts.all_charts(trace.frame(rounds))
    assert len(acc.data) == 0 and len(hist.data) == 0 and len(pos.data) == 0
    assert len(lat.data) == 2 and len(lat.data[0].y) == len(rounds)
