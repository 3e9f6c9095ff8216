"""The theory explorer: Leviathan et al.'s expected tokens per round and speedup against k, the
same model calibrated to this machine's measured verify cost v(k), and the measured cost of
scoring n tokens in one pass. Pure functions of numbers -> plotly figures (the formulas live in
playground.core.theory; this module only draws them)."""

from __future__ import annotations

import math

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from playground.core import theory
from playground.core.errors import PlaygroundError, shown
from playground.views import charts

IDEAL, CALIBRATED = "ideal (v = 1)", "this machine (measured v(k))"


def _real(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _star(k: int, y: float, name: str, color: str) -> go.Scatter:
    return go.Scatter(
        x=[k],
        y=[y],
        mode="markers+text",
        name=name,
        text=[f"k = {k}"],
        textposition="bottom center",
        marker=dict(symbol="star", size=16, color=color),
    )


def theory_figure(
    alpha: float, c: float, k_max: int = 16, measured: dict | None = None, profile: theory.CostProfile | None = None
) -> go.Figure:
    """Expected tokens per round (left) and expected speedup (right) against k = 1..k_max for one
    alpha and c. The speedup panel draws Leviathan's ideal curve E(alpha, k) / (k c + 1), and, with
    a profile, this machine's curve E(alpha, k) / (k c + v(k)); the best k of each is starred.
    `measured` ({"k", "tokens_per_round", "speedup"}, see measured_point) overlays a run."""
    if not (_real(alpha) and 0 <= alpha <= 1) or not (_real(c) and c >= 0):
        raise PlaygroundError(f"alpha must be in [0, 1] and c >= 0, got alpha={shown(alpha)}, c={shown(c)}.")
    if isinstance(k_max, bool) or not isinstance(k_max, int) or k_max < 1:
        raise PlaygroundError(f"k_max must be a whole number >= 1, got {shown(k_max)}.")
    ks = list(range(1, k_max + 1))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Expected tokens per round", "Expected speedup"))
    tokens = [theory.expected_tokens(alpha, k) for k in ks]
    fig.add_trace(_curve(ks, tokens, "theory: tokens / round", dict(color=charts.BLUE)), 1, 1)
    fig.add_trace(_curve(ks, [theory.speedup(alpha, k, c) for k in ks], IDEAL, dict(color=charts.GREEN)), 1, 2)
    best = theory.best_k(alpha, c, k_max)
    fig.add_trace(_star(best, theory.speedup(alpha, best, c), f"best k = {best} (ideal)", charts.ORANGE), 1, 2)
    if profile is not None:
        _add_calibrated(fig, alpha, c, k_max, profile)
    fig.add_hline(y=1, line=dict(color=charts.GREY, dash="dot"), row=1, col=2)
    if measured:
        _add_run(fig, measured)
    charts.layout(fig, "", "", "")
    fig.update_xaxes(title_text="k (draft length)")
    fig.update_layout(
        height=380,
        margin=dict(l=50, r=15, t=40, b=110),
        legend=dict(orientation="h", x=0.5, xanchor="center", y=-0.28, yanchor="top"),
    )
    return fig


def _curve(ks: list[int], ys: list[float], name: str, line: dict) -> go.Scatter:
    return go.Scatter(x=ks, y=ys, mode="lines+markers", name=name, line=line)


def _add_calibrated(fig: go.Figure, alpha: float, c: float, k_max: int, profile: theory.CostProfile) -> None:
    """This machine's speedup curve, E(alpha, k) / (k c + v(k)) with v(k) from the profile, and its best k."""
    ks = list(range(1, k_max + 1))
    ys = [theory.calibrated_speedup(alpha, k, c, profile) for k in ks]
    fig.add_trace(_curve(ks, ys, CALIBRATED, dict(color=charts.PURPLE, dash="dash")), 1, 2)
    mine = theory.best_k_calibrated(alpha, c, profile, k_max)
    speedup = theory.calibrated_speedup(alpha, mine, c, profile)
    fig.add_trace(_star(mine, speedup, f"best k = {mine} (this machine)", charts.PURPLE), 1, 2)


def _add_run(fig: go.Figure, measured: dict) -> None:
    """A run as a diamond on each panel where it has the figure: tokens per round (left), speedup (right)."""
    k = measured.get("k")
    diamond = dict(symbol="diamond", size=13, color=charts.VERMILLION)
    if k and _real(measured.get("tokens_per_round")):
        point = go.Scatter(x=[k], y=[measured["tokens_per_round"]], mode="markers", name="this run", marker=diamond)
        fig.add_trace(point, 1, 1)
    if k and _real(measured.get("speedup")):
        point = go.Scatter(
            x=[k], y=[measured["speedup"]], mode="markers", name="this run (measured)", marker=diamond, showlegend=False
        )
        fig.add_trace(point, 1, 2)


def measured_point(summary: dict) -> dict | None:
    """The overlay point of a run summary (trace.summarize): k = the mean draft length rounded, the
    run's tokens per round and speedup; None without draft rounds."""
    mean_k = summary.get("mean_k") if summary else None
    if not _real(mean_k) or not mean_k:
        return None
    return {
        "k": max(1, round(mean_k)),
        "tokens_per_round": summary["tokens_per_round"],
        "speedup": summary.get("speedup"),
    }


def profile_figure(verify_s: dict[int, float]) -> go.Figure:
    """V(n) / V(1) against n: what checking n tokens in one target pass costs, in target steps.
    The dotted line at 1 is Leviathan's assumption (v = 1: checking costs one step, whatever n)."""
    fig = go.Figure()
    title = "Cost of checking n tokens at once, in target steps"
    if not verify_s:
        charts.note(fig, "No cost profile yet: run once to measure V(n)")
    else:
        step = theory.CostProfile(dict(verify_s)).step_s  # V(1), or the nearest n measured
        ns = sorted(verify_s)
        fig.add_scatter(
            x=ns,
            y=[verify_s[n] / step for n in ns],
            mode="lines+markers",
            name="measured V(n) / V(1)",
            line=dict(color=charts.PURPLE),
            customdata=[verify_s[n] * 1000 for n in ns],
            hovertemplate="n = %{x}: %{y:.2f} steps (%{customdata:.1f} ms)<extra></extra>",
        )
        fig.add_hline(
            y=1, line=dict(color=charts.GREY, dash="dot"), annotation_text=IDEAL, annotation_position="bottom right"
        )
    return charts.layout(fig, title, "n (tokens scored in one pass)", "V(n) / V(1)")
