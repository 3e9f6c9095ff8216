"""The teaching and comparison tools: pure views of round records and benchmark grids.

- step-through: what one round did, position by position (p and q bars for the proposed token and
  its likeliest alternatives, the verdict, the residual a correction is drawn from);
- theory explorer: expected tokens per round and speedup vs k for an alpha and c, best k marked,
  a measured run overlaid;
- sweep (k x temperature) and pair comparison: grids of benchmark runs (playground.bench, the
  same engine and baseline) as a DataFrame, heatmaps and bar charts.

Every piece of model or user text goes through render.escape_text.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from transformers import PreTrainedTokenizerBase

from playground import bench, charts, render, theory
from playground.engine import K_MAX, RoundRecord
from playground.errors import PlaygroundError

MAX_CELLS = 64  # runs in one sweep or comparison (each runs the engine; the baseline runs once per prompt)


# ---------------------------------------------------------------- step-through

def _bar(value: float, kind: str) -> str:
    width = 0.0 if value is None or math.isnan(value) else max(0.0, min(1.0, value)) * 80  # room for the number
    return (f'<span class="bar bar-{kind}" style="width:{width:.1f}%"></span>'
            f'<span class="bar-num">{render.num(value)}</span>')


def _alternatives_table(rows: list[tuple[int, float, float]], tokenizer, context: list[int], marks: dict[int, str],
                        show_p: bool = True) -> str:
    out = ['<table class="alts"><tr><th>token</th>' + ("<th>p (draft)</th>" if show_p else "") + "<th>q (target)</th></tr>"]
    for token, p, q in rows:
        piece = render.piece_text(tokenizer, context, token)
        text = render.escape_text(piece.replace(" ", "␣") if piece and not piece.strip() else piece)  # visible blanks
        mark = marks.get(token, "")
        label = f' <span class="alt-mark">{mark}</span>' if mark else ""
        out.append(f'<tr><td><code>{text or "∅"}</code> <span class="tok-id">#{int(token)}</span>{label}</td>' + (f"<td>{_bar(p, 'p')}</td>" if show_p else "")
                   + f"<td>{_bar(q, 'q')}</td></tr>")
    out.append("</table>")
    return "".join(out)


def explain_round(record: RoundRecord, tokenizer: PreTrainedTokenizerBase, context: Sequence[int],
                  greedy: bool) -> str:
    """One round, position by position (needs a decoder run with DecodeConfig(explain=N)).
    context: the output ids before this round."""
    ctx = list(context)
    k, n = record.k, record.accepted
    head = (f"<h4>Round {record.round + 1}: the drafter proposed {k} token{'s' if k != 1 else ''}; "
            f"the target kept {n} and added a {record.token_kind} token</h4>")
    if k == 0:
        head = f"<h4>Round {record.round + 1}: no draft (k = 0), one plain target step</h4>"
    parts = [head]
    rule = ("greedy: a draft token is kept when it is the target's most likely token (argmax q)" if greedy else
            "sampling: keep draft token x when u < min(1, q(x)/p(x)), u uniform in [0, 1)")
    parts.append(f'<p class="rule">{rule}</p>')
    for i, rows in enumerate(record.alternatives):
        is_bonus = i == k
        marks: dict[int, str] = {}
        if not is_bonus:
            tok, p, q = record.draft_tokens[i], record.p[i], record.q[i]
            marks[tok] = "draft"
            word = render.escape_text(render.piece_text(tokenizer, ctx, tok))
            if greedy:
                top = max(rows, key=lambda r: r[2])[0]
                kept = i < n
                verdict = (f"argmax q is <code>{render.escape_text(render.piece_text(tokenizer, ctx, top))}</code>"
                           f" {'=' if kept else '≠'} the draft → {'accepted' if kept else 'rejected'}")
            else:
                ratio = min(1.0, q / p) if p > 0 else float("nan")  # prompt lookup: p = 1
                u = record.u[i] if i < len(record.u) else float("nan")
                kept = i < n
                verdict = (f"u = {render.num(u)} {'<' if kept else '≥'} min(1, q/p) = {render.num(ratio)}"
                           f" → {'accepted' if kept else 'rejected'}")
            if i == n:
                marks[record.token] = "correction"
            cls = "accepted" if i < n else "rejected"
            parts.append(f'<div class="pos pos-{cls}"><div class="pos-head">position {i + 1}: draft '
                         f'<code>{word}</code> (p = {render.num(p)}, q = {render.num(q)}): {verdict}</div>')
        else:
            marks[record.token] = "bonus"
            parts.append('<div class="pos pos-bonus"><div class="pos-head">all drafts accepted: the bonus token '
                         f"is {'the argmax' if greedy else 'drawn from'} q at the next position</div>")
        parts.append(_alternatives_table(rows, tokenizer, ctx, marks, show_p=not is_bonus))
        if i == n and n < k:
            if record.residual:
                parts.append('<div class="residual-head">the correction is drawn from the residual '
                             'norm(max(0, q − p)):</div>')
                parts.append(_alternatives_table([(t, float("nan"), r) for t, r in record.residual], tokenizer, ctx,
                                                 {record.token: "drawn"}, show_p=False))
            elif greedy:
                parts.append('<div class="residual-head">greedy: the correction is the argmax of q</div>')
        parts.append("</div>")
        if i < k:
            ctx.append(record.draft_tokens[i] if i < n else record.token)
    if n < k - 1:
        rest = "".join(render.escape_text(render.piece_text(tokenizer, ctx, t)) for t in record.draft_tokens[n + 1:])
        parts.append(f'<p class="unevaluated">not evaluated (after the rejection): <code>{rest}</code></p>')
    return '<div class="explain">' + "".join(parts) + "</div>"


# ---------------------------------------------------------------- theory explorer

def theory_figure(alpha: float, c: float, k_max: int = K_MAX, measured: dict | None = None) -> go.Figure:
    """Expected tokens per round and expected speedup vs k for one alpha and c; the best k marked;
    `measured` ({"k", "tokens_per_round", "speedup"}) overlays a run."""
    if not (isinstance(alpha, (int, float)) and 0 <= alpha <= 1) or not (isinstance(c, (int, float)) and c >= 0):
        raise PlaygroundError(f"alpha must be in [0, 1] and c >= 0, got alpha={alpha!r}, c={c!r}.")
    ks = list(range(1, k_max + 1))
    tokens = [theory.expected_tokens(alpha, k) for k in ks]
    speed = [theory.speedup(alpha, k, c) for k in ks]
    best = theory.best_k(alpha, c, k_max)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Expected tokens per round", "Expected speedup"))
    fig.add_trace(go.Scatter(x=ks, y=tokens, mode="lines+markers", name="theory: tokens / round",
                             line=dict(color=charts.BLUE)), 1, 1)
    fig.add_trace(go.Scatter(x=ks, y=speed, mode="lines+markers", name="theory: speedup",
                             line=dict(color=charts.GREEN)), 1, 2)
    fig.add_trace(go.Scatter(x=[best], y=[theory.speedup(alpha, best, c)], mode="markers+text", name=f"best k = {best}",
                             text=[f"best k = {best}"], textposition="bottom center",
                             marker=dict(symbol="star", size=16, color=charts.ORANGE)), 1, 2)
    fig.add_hline(y=1, line=dict(color=charts.GREY, dash="dot"), row=1, col=2)
    if measured:
        k = measured.get("k")
        if measured.get("tokens_per_round") is not None and k:
            fig.add_trace(go.Scatter(x=[k], y=[measured["tokens_per_round"]], mode="markers", name="this run",
                                     marker=dict(symbol="diamond", size=13, color=charts.VERMILLION)), 1, 1)
        if measured.get("speedup") is not None and k and not math.isnan(measured["speedup"]):
            fig.add_trace(go.Scatter(x=[k], y=[measured["speedup"]], mode="markers", name="this run (measured)",
                                     marker=dict(symbol="diamond", size=13, color=charts.VERMILLION),
                                     showlegend=False), 1, 2)
    charts.layout(fig, "", "", "")
    fig.update_xaxes(title_text="k (draft length)")
    fig.update_layout(height=380, margin=dict(l=50, r=15, t=40, b=110),
                      legend=dict(orientation="h", x=0.5, xanchor="center", y=-0.28, yanchor="top"))
    return fig


def measured_point(summary: dict) -> dict | None:
    """The overlay point of a run summary (trace.summarize), None without draft rounds."""
    if not summary or not summary.get("mean_k") or math.isnan(summary["mean_k"]):
        return None
    return {"k": max(1, round(summary["mean_k"])), "tokens_per_round": summary["tokens_per_round"],
            "speedup": summary.get("speedup")}


# ---------------------------------------------------------------- sweep and pair comparison

def parse_list(text: str, name: str, cast: Callable[[str], float], check: Callable[[float], bool], rule: str) -> list:
    """"1 2 4, 8" -> [1, 2, 4, 8]; a clear error naming the field otherwise."""
    items = [t for t in str(text or "").replace(",", " ").split() if t]
    if not items:
        raise PlaygroundError(f"{name}: give at least one value ({rule}).")
    values = []
    for t in items:
        try:
            v = cast(t)
        except ValueError:
            raise PlaygroundError(f"{name}: {t!r} is not a number ({rule}).") from None
        if not check(v):
            raise PlaygroundError(f"{name}: {t!r} is out of range ({rule}).")
        if v not in values:
            values.append(v)
    return values


def run_grid(pairs: list, prompts: dict[str, str], ks: list[str], temps: list[float], drafters: list[str],
             max_new_tokens: int, seed: int) -> pd.DataFrame:
    """The benchmark's grid (our engine; the target alone once per prompt and temperature), one row per run."""
    runs = len(pairs) * len(prompts) * len(temps) * len(ks) * len(drafters)
    if runs > MAX_CELLS:
        raise PlaygroundError(f"That grid needs {runs} runs; the limit is {MAX_CELLS} "
                              "(fewer k values, temperatures, prompts, pairs or drafters).")
    results = bench.bench(pairs, prompts, ks, temps, drafters, max_new_tokens, compare_hf=False, seed=seed,
                          progress=True)
    rows = [{c: getattr(r, c) for c in ("pair", "category", "method", "k", "temperature", "tokens", "tokens_per_s",
                                        "speedup", "alpha", "mean_accepted", "c", "v", "theory_speedup", "greedy_equal")}
            for r in results]
    return pd.DataFrame(rows)


def _heatmap(grid: pd.DataFrame, value: str, title: str, scale: str, zmid: float | None = None) -> go.Figure:
    table = grid.pivot_table(index="temperature", columns="k", values=value, aggfunc="mean")
    table = table[sorted(table.columns, key=lambda k: (not str(k).isdigit(), int(k) if str(k).isdigit() else 0, str(k)))]
    fig = go.Figure(go.Heatmap(z=table.values, x=[str(k) for k in table.columns], y=[f"{t:g}" for t in table.index],
                               colorscale=scale, zmid=zmid, text=[[f"{v:.2f}" for v in row] for row in table.values],
                               texttemplate="%{text}", hovertemplate="k=%{x}, T=%{y}: %{z:.3f}<extra></extra>"))
    return charts.layout(fig, title, "k", "temperature")


def sweep_figures(grid: pd.DataFrame) -> tuple[go.Figure, go.Figure, go.Figure]:
    """Heatmaps over k x temperature (mean over prompts): measured speedup, alpha, and the theoretical
    speedup for each cell's measured alpha and c."""
    ours = grid[grid["method"] != "target alone"]
    if ours.empty:
        empty = charts.note(charts.layout(go.Figure(), "Sweep", "k", "temperature"), "Run a sweep to see the grid")
        return empty, go.Figure(empty), go.Figure(empty)
    return (_heatmap(ours, "speedup", "Measured speedup over the target alone", "RdBu", 1.0),
            _heatmap(ours, "alpha", "Acceptance rate α", "Viridis"),
            _heatmap(ours, "theory_speedup", "Theory: speedup for the measured α and c", "RdBu", 1.0))


def compare_figure(grid: pd.DataFrame) -> go.Figure:
    """Bars per (pair, drafter): tokens/s, alpha, mean accepted tokens, speedup (mean over prompts)."""
    ours = grid[grid["method"] != "target alone"]
    fig = make_subplots(rows=1, cols=4, subplot_titles=("tokens/s", "α", "mean accepted / round", "speedup"))
    if ours.empty:
        return charts.note(charts.layout(fig, "Pair comparison", "", ""), "Run a comparison to see the bars")
    means = ours.groupby(["pair", "method"], sort=False)[["tokens_per_s", "alpha", "mean_accepted", "speedup"]].mean().reset_index()
    palette = [charts.BLUE, charts.GREEN, charts.ORANGE, charts.VERMILLION, charts.SKY, charts.GREY]
    for j, (method, rows) in enumerate(means.groupby("method", sort=False)):
        for col, value in enumerate(["tokens_per_s", "alpha", "mean_accepted", "speedup"], start=1):
            fig.add_trace(go.Bar(x=rows["pair"], y=rows[value], name=method, legendgroup=method, showlegend=col == 1,
                                 marker_color=palette[j % len(palette)]), 1, col)
    charts.layout(fig, "Pairs and drafters on the same prompt and settings", "", "")
    fig.update_layout(height=360, barmode="group")
    return fig
