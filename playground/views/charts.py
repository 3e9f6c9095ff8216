"""Plotly figures of a run: pure functions of trace.frame(rounds) -> go.Figure.

Every function accepts an empty frame (before the first round) and returns a figure with
a short note instead of data. Colours are Okabe-Ito, backgrounds transparent so the
figures read in light and dark mode alike.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from playground import trace

GREEN, VERMILLION, BLUE, ORANGE, SKY, GREY = "#009E73", "#D55E00", "#0072B2", "#E69F00", "#56B4E9", "#999999"
PURPLE = "#CC79A7"  # Okabe-Ito reddish purple
GRID = "rgba(128,128,128,0.25)"


def layout(fig: go.Figure, title: str, x: str, y: str, **extra) -> go.Figure:
    fig.update_layout(
        title=dict(text=title, font=dict(size=14)),
        height=300,
        margin=dict(l=50, r=15, t=45, b=45),
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        font=dict(color="#888888", size=12),
        legend=dict(
            orientation="h",
            traceorder="normal",
            yanchor="bottom",
            y=1.0,
            xanchor="right",
            x=1.0,
            bgcolor="rgba(0,0,0,0)",
        ),
        **extra,
    )
    fig.update_xaxes(title_text=x, gridcolor=GRID, zerolinecolor=GRID)
    fig.update_yaxes(title_text=y, gridcolor=GRID, zerolinecolor=GRID)
    return fig


def note(fig: go.Figure, text: str) -> go.Figure:
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5, font=dict(size=13))
    return fig


def _draft_rounds(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["k"] > 0] if len(df) else df


def acceptance_chart(df: pd.DataFrame) -> go.Figure:
    """Acceptance rate (accepted / drafted) of each round, and the running average over the run."""
    fig = go.Figure()
    rounds = _draft_rounds(df)
    if len(rounds):
        running = rounds["accepted"].cumsum() / rounds["k"].cumsum()
        fig.add_bar(
            x=rounds["round"],
            y=rounds["acceptance"],
            name="this round",
            marker_color=GREEN,
            hovertemplate="round %{x}<br>accepted %{customdata[0]} of %{customdata[1]}<extra></extra>",
            customdata=rounds[["accepted", "k"]].to_numpy(),
        )
        fig.add_scatter(
            x=rounds["round"], y=running, name="running average", mode="lines", line=dict(color=BLUE, width=2.5)
        )
    else:
        note(fig, "No draft rounds yet")
    return layout(fig, "Acceptance rate per round", "round", "accepted / drafted", yaxis_range=[0, 1.05])


def latency_chart(df: pd.DataFrame) -> go.Figure:
    """Time of each round, stacked: drafting, then the target's verification pass (ms)."""
    fig = go.Figure()
    if len(df):
        fig.add_bar(x=df["round"], y=df["draft_s"] * 1000, name="draft", marker_color=ORANGE)
        fig.add_bar(x=df["round"], y=df["verify_s"] * 1000, name="verify", marker_color=BLUE)
    else:
        note(fig, "No rounds yet")
    return layout(fig, "Latency per round", "round", "ms", barmode="stack")


def accepted_histogram(df: pd.DataFrame) -> go.Figure:
    """How many draft tokens each round kept (0, 1, ..., max k), against what the i.i.d. model expects."""
    fig = go.Figure()
    measured, expected = trace.accepted_histogram(list(df.itertuples())) if len(df) else ([], [])
    if measured:
        fig.add_bar(
            x=list(range(len(measured))),
            y=measured,
            name="measured",
            marker_color=SKY,
            hovertemplate="%{y} rounds kept %{x} drafts<extra></extra>",
        )
        fig.add_scatter(
            x=list(range(len(expected))),
            y=expected,
            name="i.i.d. model (geometric)",
            mode="markers+lines",
            marker_color=ORANGE,
            line_dash="dot",
            hovertemplate="the i.i.d. model expects %{y:.1f} rounds to keep %{x}<extra></extra>",
        )
    else:
        note(fig, "No draft rounds yet")
    fig = layout(fig, "Accepted tokens per round", "accepted draft tokens", "rounds", bargap=0.15)
    return fig.update_xaxes(dtick=1)


def position_chart(df: pd.DataFrame) -> go.Figure:
    """Per draft position i: of the rounds that reached i, the share that kept it."""
    fig = go.Figure()
    rates = trace.depth_acceptance(list(df.itertuples())) if len(df) else []
    if rates:
        fig.add_bar(
            x=list(range(1, len(rates) + 1)),
            y=rates,
            name="acceptance",
            marker_color=GREEN,
            hovertemplate="position %{x}: %{y:.2f}<extra></extra>",
        )
    else:
        note(fig, "No draft rounds yet")
    fig = layout(fig, "Acceptance by draft position", "draft position", "kept / reached", yaxis_range=[0, 1.05])
    return fig.update_xaxes(dtick=1)


def all_charts(df: pd.DataFrame) -> tuple[go.Figure, go.Figure, go.Figure, go.Figure]:
    """The four figures of the UI, in display order."""
    return acceptance_chart(df), latency_chart(df), accepted_histogram(df), position_chart(df)
