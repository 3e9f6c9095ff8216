"""The sweep (k x temperature) and the pair comparison: figures of a benchmark grid.

The grid is a DataFrame with one row per run (playground.bench.grid builds it): columns "pair",
"method" (the drafter's label; the baseline's is "target alone"), "k" (text: a number or a
policy name), "temperature", "tokens_per_s", "speedup", "alpha", "mean_accepted",
"theory_speedup". Pure functions: DataFrame in, plotly figures out.
"""

from __future__ import annotations

import re

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground import decoding
from playground.views import charts

BASELINE = decoding.BASELINE.value  # the target alone's method
COMPARED = (
    ("tokens_per_s", "tokens/s"),
    ("alpha", "α"),
    ("mean_accepted", "mean accepted / round"),
    ("speedup", "speedup"),
)


def _k_order(k: object) -> tuple:
    """Numbers in numeric order first ("2" before "10"), then policy names alphabetically."""
    text = str(k)
    return (not text.isdigit(), int(text) if text.isdigit() else 0, text)


def _heatmap(grid: pd.DataFrame, value: str, title: str, scale: str, zmid: float | None = None) -> go.Figure:
    """One value over temperature (rows) x k (columns), the mean over the grid's other axes."""
    table = grid.pivot_table(index="temperature", columns="k", values=value, aggfunc="mean")
    table = table[sorted(table.columns, key=_k_order)]
    fig = go.Figure(
        go.Heatmap(
            z=table.values,
            x=[str(k) for k in table.columns],
            y=[f"{t:g}" for t in table.index],
            colorscale=scale,
            zmid=zmid,
            text=[[f"{v:.2f}" for v in row] for row in table.values],
            texttemplate="%{text}",
            hovertemplate="k=%{x}, T=%{y}: %{z:.3f}<extra></extra>",
        )
    )
    return charts.layout(fig, title, "k", "temperature")


def sweep_figures(grid: pd.DataFrame) -> tuple[go.Figure, go.Figure, go.Figure]:
    """Heatmaps over k x temperature (mean over prompts): measured speedup, alpha, and the theoretical
    speedup for each cell's measured alpha and c. The baseline's rows are left out."""
    ours = grid[grid["method"] != BASELINE] if len(grid) else grid
    if ours.empty:
        empty = charts.note(charts.layout(go.Figure(), "Sweep", "k", "temperature"), "Run a sweep to see the grid")
        return empty, go.Figure(empty), go.Figure(empty)
    return (
        _heatmap(ours, "speedup", "Measured speedup over the target alone", "RdBu", 1.0),
        _heatmap(ours, "alpha", "Acceptance rate α", "Viridis"),
        _heatmap(ours, "theory_speedup", "Theory: speedup for the measured α and c", "RdBu", 1.0),
    )


def short_pair(name: str) -> str:
    """A catalog name without its trailing "(...)" remarks, for axis labels: "SmolLM2 135M -> Qwen2.5-Coder 1.5B"."""
    return re.sub(r"\s*\([^()]*\)$", "", name) or name


def _speculative(grid: pd.DataFrame) -> pd.DataFrame:
    """The rows that drafted: no engine's target alone (ours, HF's, vLLM's), whose speedup is 1 by definition."""
    if not len(grid):
        return grid
    keep = grid["method"] != BASELINE
    if "drafter" in grid.columns:
        keep &= grid["drafter"] != BASELINE
    return grid[keep]


def compare_figure(grid: pd.DataFrame) -> go.Figure:
    """Horizontal bars per (pair, drafter), one panel per figure (tokens/s, alpha, mean accepted tokens,
    speedup, and the draft's cost c when the grid has it; means over prompts); one colour per drafter,
    the pairs down the shared y axis (short names; the full ones on hover). The baselines' rows are left out;
    vLLM's rows (method "vLLM ...") sit beside ours, their speedup over vLLM's own target alone."""
    ours = _speculative(grid)
    compared = list(COMPARED) + ([("c", "draft cost c (target steps)")] if "c" in grid.columns else [])
    fig = make_subplots(
        rows=1,
        cols=len(compared),
        subplot_titles=[title for _, title in compared],
        shared_yaxes=True,
        horizontal_spacing=0.02,
    )
    if ours.empty:
        return charts.note(charts.layout(fig, "Pair comparison", "", ""), "Run a comparison to see the bars")
    columns = [value for value, _ in compared]
    means = ours.groupby(["pair", "method"], sort=False)[columns].mean().reset_index()
    pairs = list(dict.fromkeys(means["pair"]))
    labels = {p: short_pair(p) for p in pairs}
    if len(set(labels.values())) < len(labels):  # two names that only their remarks tell apart
        labels = {p: p for p in pairs}
    palette = [charts.BLUE, charts.GREEN, charts.ORANGE, charts.VERMILLION, charts.SKY, charts.PURPLE, charts.GREY]
    for j, (method, rows) in enumerate(means.groupby("method", sort=False)):
        for col, value in enumerate(columns, start=1):
            fig.add_trace(
                go.Bar(
                    y=[labels[p] for p in rows["pair"]],
                    x=rows[value],
                    name=method,
                    legendgroup=method,
                    orientation="h",
                    showlegend=col == 1,
                    marker_color=palette[j % len(palette)],
                    customdata=rows["pair"],
                    text=[f"{x:.2f}" for x in rows[value]],
                    textposition="auto",
                    hovertemplate=f"%{{customdata}}<br>{method}: %{{x:.3f}}<extra></extra>",
                ),
                1,
                col,
            )
    if "speedup" in columns:  # the target alone's speed: bars that end left of it lose
        fig.add_vline(x=1.0, line_dash="dot", line_color=charts.GREY, col=columns.index("speedup") + 1, row=1)
    charts.layout(fig, "Pairs and drafters on the same prompt and settings", "", "")
    fig.update_layout(
        height=140 + 28 * len(pairs) * means["method"].nunique(),
        barmode="group",
        margin=dict(l=10, r=10, t=80, b=40),
        legend=dict(orientation="h", yanchor="top", y=-0.04, xanchor="left", x=0.0),
    )
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_annotations(font_size=12)
    return fig


def positions_figure(positions: pd.DataFrame) -> go.Figure:
    """Acceptance by draft position (accepted at position i / drafts, vLLM's definition; vllm.peer,
    vllm.report.positions_frame), one line per (pair, method, k): ours and vLLM's in the same chart."""
    fig = go.Figure()
    charts.layout(fig, "Acceptance by draft position (accepted at position i / drafts)", "draft position", "acceptance")
    if positions.empty:
        return charts.note(fig, "Run a comparison to see acceptance by position")
    pairs = positions["pair"].nunique() > 1
    palette = [charts.BLUE, charts.GREEN, charts.ORANGE, charts.VERMILLION, charts.SKY, charts.PURPLE, charts.GREY]
    for j, ((pair, method, k), rows) in enumerate(positions.groupby(["pair", "method", "k"], sort=False)):
        rows = rows.groupby("position", as_index=False)["acceptance"].mean()  # over temperatures
        name = f"{method}{f' k={k}' if k else ''}" + (f" · {short_pair(pair)}" if pairs else "")
        vllm = str(method).startswith("vLLM")
        fig.add_trace(
            go.Scatter(
                x=rows["position"],
                y=rows["acceptance"],
                name=name,
                mode="lines+markers",
                line=dict(color=palette[j % len(palette)], dash="dash" if vllm else "solid"),
                hovertemplate=f"{name}<br>position %{{x}}: %{{y:.3f}}<extra></extra>",
            )
        )
    fig.update_xaxes(dtick=1)
    fig.update_yaxes(range=[0, 1.05])
    return fig
