"""The Challenges tab's figures and text: batch size, context length and precision, each measured here and
printed beside the published figures, with a paragraph on the mechanism. Pure: DataFrames in (built by
playground.bench.challenges), plotly figures and text out."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.core.config import BASELINE, SPECULATIVE
from playground.views import charts

BATCH, CONTEXT, PRECISION = "batch size", "context length", "precision"
EFFECTS = (BATCH, CONTEXT, PRECISION)
SURVEY = (
    'Ryu & Kim 2024, "Closer Look at Efficient Inference Methods: A Survey of Speculative Decoding", arXiv:2411.13157'
)
LLAMA_CPP = "https://github.com/ggml-org/llama.cpp/pull/5625"

# The published figures, each with where it comes from: (label, low, high, source).
SURVEY_BATCH = (("batch 1", 1, 2.5, 2.85), ("batch 16", 16, 0.48, 0.88))
LLAMA_CPP_PRECISION = (("34B F16 target", 3.0), ("34B Q8_0 target", 1.5), ("34B Q4_K target", 1.0))

REFERENCES = {
    BATCH: (
        f"**Published:** speedups that fall from **2.5-2.85x at batch size 1 to 0.48-0.88x at batch size 16**, as "
        f"cited by {SURVEY} (its section on the challenges of deployment: throughput at larger batch sizes)."
    ),
    CONTEXT: (
        f"**Published:** {SURVEY} names long contexts as a challenge: the KV cache grows with the context for the "
        "draft and the target alike, so both get slower per token and the memory each sequence holds grows. "
        "It gives no single figure; the chart is this machine's."
    ),
    PRECISION: (
        f"**Published:** {SURVEY} reports quantisation slowing speculative decoding down by up to 7x in one "
        f"setting. llama.cpp's maintainers measured a 7B Q4_0 draft for a 34B CodeLlama target on an A100: "
        f"**up to 3x with an F16 target, up to 1.5x with a Q8_0 target, no significant gain with a Q4_K "
        f"target** ([llama.cpp PR 5625]({LLAMA_CPP}), 2024-03-02)."
    ),
}

MECHANISMS = {
    BATCH: (
        "**Why.** One sequence decoding alone is memory-bound: each step streams every weight of the target to "
        "score one token, and the arithmetic units mostly wait. Verifying k + 1 tokens in the same pass uses that "
        "idle compute, almost for free, which is where speculative decoding's gain comes from. A batch of B "
        "sequences already fills that idle compute with B tokens per step; verifying k + 1 tokens for each of them "
        "multiplies the work by k + 1 once the pass is compute-bound, and every rejected draft is work thrown "
        "away. The bigger the batch, the less idle compute is left for verification, until drafting and verifying "
        "cost more than they save: the speedup falls under 1. Rows accept different numbers of tokens, so the "
        "batch also carries padding (batch.py: per-row holes in the KV cache, masked)."
    ),
    CONTEXT: (
        "**Why.** Each decoding step reads the whole KV cache: at short contexts the weights dominate the bytes a "
        "step moves, at long contexts the cache does, for the draft as much as for the target. The draft's cost "
        "per token (c) then grows faster than a small model's weights would suggest, and the prompt pass, paid by "
        "both models, grows with the context. Verifying k + 1 tokens still reads the cache once, so v stays "
        "close to one step while the whole run's speedup is pulled towards 1 by the prompt pass both pay."
    ),
    PRECISION: (
        "**Why.** Speculative decoding pays when the target's step is expensive compared with the draft's (small "
        "c) and when scoring k + 1 tokens costs about one step (v near 1, memory-bound). A lower-precision "
        "target is cheaper per step, which raises c; a quantised target's kernels can be compute-bound at "
        "k + 1 rows (dequantising every weight for each row), which raises v. A lower-precision draft lowers c "
        "but may agree less often (alpha). The target alone runs at the same target precision, so each cell is "
        "the gain at that precision, not the gain of lowering it."
    ),
}


def crossover(frame: pd.DataFrame) -> int | None:
    """The smallest batch size where speculative decoding is slower than the batched target alone (None: never)."""
    if frame is None or not len(frame) or "speedup" not in frame:
        return None
    slower = frame[(frame["method"] == SPECULATIVE) & (frame["speedup"] < 1)]
    return int(slower["batch_size"].min()) if len(slower) else None


def _finish(fig: go.Figure, title: str, x: str = "", height: int = 400) -> go.Figure:
    """charts.layout, with the legend under the subplots (above them it would cover their titles)."""
    charts.layout(fig, title, x, "")
    fig.update_layout(
        height=height,
        margin=dict(l=50, r=15, t=70, b=120),
        legend=dict(orientation="h", yanchor="top", y=-0.28, xanchor="left", x=0.0),
    )
    return fig


def _empty(title: str, message: str) -> go.Figure:
    return charts.note(charts.layout(go.Figure(), title, "", ""), message)


def batch_figure(frame: pd.DataFrame) -> go.Figure:
    """Left: tokens/s of all sequences together vs batch size, speculative and the batched target alone. Right: the
    speedup vs batch size, the survey's cited ranges beside it, the line at 1 and the first batch size under it."""
    title = "Batch size: throughput and speedup"
    if frame is None or not len(frame):
        return _empty(title, "Run the batch-size challenge to see the curves")
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=["tokens/s, all sequences together", "speedup over the target alone"]
    )
    for method, colour in ((BASELINE, charts.GREY), (SPECULATIVE, charts.BLUE)):
        rows = frame[frame["method"] == method].sort_values("batch_size")
        fig.add_scatter(
            x=rows["batch_size"],
            y=rows["tokens_per_s"],
            name=method,
            mode="lines+markers",
            line=dict(color=colour, width=2.5),
            row=1,
            col=1,
        )
    spec = frame[frame["method"] == SPECULATIVE].sort_values("batch_size")
    fig.add_scatter(
        x=spec["batch_size"],
        y=spec["speedup"],
        name="speedup (this machine)",
        mode="lines+markers",
        line=dict(color=charts.GREEN, width=2.5),
        row=1,
        col=2,
    )
    for label, b, low, high in SURVEY_BATCH:
        fig.add_scatter(
            x=[b, b],
            y=[low, high],
            name="survey (cited)",
            legendgroup="survey",
            showlegend=b == 1,
            mode="lines+markers",
            line=dict(color=charts.ORANGE, width=6),
            marker=dict(symbol="line-ew-open"),
            hovertemplate=f"{label}: {low}-{high}x (cited by the survey)<extra></extra>",
            row=1,
            col=2,
        )
    fig.add_hline(y=1.0, line=dict(color=charts.GREY, dash="dash"), row=1, col=2)
    under = crossover(frame)
    if under is not None:
        y = float(spec[spec["batch_size"] == under]["speedup"].iloc[0])
        fig.add_scatter(
            x=[under],
            y=[y],
            name=f"under 1 from batch {under}",
            mode="markers",
            marker=dict(color=charts.VERMILLION, size=14, symbol="x"),
            row=1,
            col=2,
        )
    _finish(fig, title, "batch size")
    fig.update_xaxes(type="log", dtick=math.log10(2))
    return fig


def context_figure(frame: pd.DataFrame) -> go.Figure:
    """Left: speedup (whole run, decoding rounds only) and alpha vs context. Middle: a draft token, a verify round
    and a target-alone step in ms. Right: the KV caches' memory (measured; the config's estimate dotted)."""
    title = "Context length: speedup, costs and KV-cache memory"
    if frame is None or not len(frame):
        return _empty(title, "Run the context-length challenge to see the curves")
    frame = frame.sort_values("context")
    x = frame["context"]
    fig = make_subplots(rows=1, cols=3, subplot_titles=["speedup and α", "cost (ms)", "KV cache (MiB)"])
    for column, name, colour in (
        ("speedup", "speedup (whole run)", charts.GREEN),
        ("decode_speedup", "speedup (after the prompt pass)", charts.BLUE),
        ("alpha", "α", charts.PURPLE),
    ):
        fig.add_scatter(x=x, y=frame[column], name=name, mode="lines+markers", line=dict(color=colour), row=1, col=1)
    fig.add_hline(y=1.0, line=dict(color=charts.GREY, dash="dash"), row=1, col=1)
    for column, name, colour in (
        ("draft_ms_per_token", "draft, per token", charts.ORANGE),
        ("verify_ms_per_round", "verify, per round", charts.VERMILLION),
        ("target_step_ms", "target alone, per step", charts.GREY),
    ):
        fig.add_scatter(x=x, y=frame[column], name=name, mode="lines+markers", line=dict(color=colour), row=1, col=2)
    fig.add_scatter(
        x=x,
        y=frame["kv_mib_target"],
        name="KV target",
        mode="lines+markers",
        line=dict(color=charts.BLUE),
        row=1,
        col=3,
    )
    fig.add_scatter(
        x=x, y=frame["kv_mib_draft"], name="KV draft", mode="lines+markers", line=dict(color=charts.SKY), row=1, col=3
    )
    fig.add_scatter(
        x=x,
        y=frame["kv_mib_estimate"],
        name="KV both, from the configs",
        mode="lines",
        line=dict(color=charts.GREY, dash="dot"),
        row=1,
        col=3,
    )
    _finish(fig, title, "context (prompt tokens)", 420)
    fig.update_xaxes(type="log")
    return fig


def precision_figure(frame: pd.DataFrame) -> go.Figure:
    """Left: the measured speedup over target precision (rows) x draft precision (columns), each cell with alpha,
    c and v. Right: llama.cpp's published speedups by target precision, for scale."""
    title = "Precision: speedup over the target alone at the same target precision"
    ours = frame[frame["method"] != BASELINE] if frame is not None and len(frame) else None
    if ours is None or not len(ours):
        return _empty(title, "Run the precision challenge to see the grid")
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.62, 0.38],
        subplot_titles=["this machine: speedup (α, c, v)", "llama.cpp, A100 (PR 5625): up to"],
    )
    table = ours.pivot_table(index="target_precision", columns="draft_precision", values="speedup", aggfunc="mean")
    text = []
    for t in table.index:
        line = []
        for d in table.columns:
            cell = ours[(ours["target_precision"] == t) & (ours["draft_precision"] == d)]
            line.append(
                ""
                if cell.empty
                else f"{cell['speedup'].iloc[0]:.2f}x<br>α {cell['alpha'].iloc[0]:.2f}, "
                f"c {cell['c'].iloc[0]:.2f}, v {cell['v'].iloc[0]:.2f}"
            )
        text.append(line)
    fig.add_trace(
        go.Heatmap(
            z=table.values,
            x=[f"draft {d}" for d in table.columns],
            y=[f"target {t}" for t in table.index],
            colorscale="RdBu",
            zmid=1.0,
            text=text,
            texttemplate="%{text}",
            showscale=False,
            hovertemplate="%{y}, %{x}: %{z:.2f}x<extra></extra>",
        ),
        1,
        1,
    )
    fig.add_bar(
        x=[label for label, _ in LLAMA_CPP_PRECISION],
        y=[v for _, v in LLAMA_CPP_PRECISION],
        marker_color=charts.ORANGE,
        name="llama.cpp (7B Q4_0 draft)",
        text=[f"{v:g}x" for _, v in LLAMA_CPP_PRECISION],
        textposition="outside",
        row=1,
        col=2,
    )
    return _finish(fig, title)


def headline(effect: str, frame: pd.DataFrame) -> str:
    """One line of what a run found, for the status line and the report."""
    if frame is None or not len(frame):
        return "Nothing ran."
    if effect == BATCH:
        spec = frame[frame["method"] == SPECULATIVE].sort_values("batch_size")
        parts = ", ".join(f"B={int(r.batch_size)}: {r.speedup:.2f}x" for r in spec.itertuples())
        under = crossover(frame)
        where = f"under 1 from batch size {under}" if under is not None else "never under 1 here"
        return f"Speedup over the batched target alone: {parts}; {where}. {_greedy(frame)}"
    if effect == CONTEXT:
        parts = ", ".join(f"{int(r.context)}: {r.speedup:.2f}x" for r in frame.sort_values("context").itertuples())
        return f"Speedup by context length (tokens): {parts}. {_greedy(frame)}"
    ours = frame[frame["method"] != BASELINE]
    parts = ", ".join(f"{r.target_precision}/{r.draft_precision}: {r.speedup:.2f}x" for r in ours.itertuples())
    return f"Speedup by target/draft precision: {parts}. {_greedy(ours)}"


def _greedy(frame: pd.DataFrame) -> str:
    """Whether every greedy output equalled its target-alone output; near-ties named apart from real differences."""
    equal = frame["greedy_equal"].astype(bool)
    if equal.all():
        return "Every greedy output equals its target-alone output."
    if "near_ties" in frame:  # the batch frame counts sequences per row
        ties, real = int(frame["near_ties"].sum()), int(frame["real_differences"].sum())
    else:
        differ = frame[~equal]
        ties = int(differ["near_tie"].astype(bool).sum())
        real = len(differ) - ties
    return (
        f"Greedy outputs equal to the target alone's except {ties} that differ after a near-tie"
        + (f" and {real} REAL DIFFERENCES" if real else "")
        + " (see the table)."
    )
