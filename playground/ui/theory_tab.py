"""The Theory tab: Leviathan et al.'s expected tokens per round and speedup for an alpha and a c,
this machine's calibrated curve when the last run has the runner's cost profile, and that
profile itself, V(n) / V(1)."""

from __future__ import annotations

import math
from typing import Any

import gradio as gr

from playground.env import settings
from playground.core import theory
from playground.core.inputs import parse_real
from playground.ui.common import checked_by_us, error_status
from playground.ui.state import CurrentRun, SessionState
from playground.views.theory import measured_point, profile_figure, theory_figure

ALPHA_MAX = 0.99  # the slider's end: at α = 1 every draft is accepted and the best k is unbounded


def _last_run(state: SessionState | None) -> CurrentRun | None:
    run = state.run if state is not None else None
    return run if run is not None and run.rounds else None


def theory_view(alpha: float, c: float, state: SessionState | None) -> tuple[Any, str, Any]:
    """(the theory figure, a line on the best k, the V(n) figure); the last run overlaid when there is one."""
    run = _last_run(state)
    profile = run.profile if run is not None else None
    measured = measured_point(run.summary()) if run is not None else None
    try:
        alpha, c = (
            parse_real(alpha, "α (acceptance rate)", 0, ALPHA_MAX),
            parse_real(c, "c (draft cost per token)", 0, 1),
        )
        fig = theory_figure(alpha, c, measured=measured, profile=profile)
    except Exception as exc:
        return gr.skip(), error_status(exc), gr.skip()
    best = theory.best_k(alpha, c)
    line = (
        f"Best k for α = {alpha:.2f}, c = {c:.2f}: **{best}** with Leviathan's ideal (v = 1), expected speedup "
        f"{theory.speedup(alpha, best, c):.2f}× ({theory.expected_tokens(alpha, best):.2f} tokens per round)."
    )
    if profile is not None:
        mine = theory.best_k_calibrated(alpha, c, profile)
        line += (
            f" Calibrated to this machine (the last run's measured v(k)): best k **{mine}**, expected "
            f"{theory.calibrated_speedup(alpha, mine, c, profile):.2f}×."
        )
    if measured:
        line += f" Diamond: the last run (k ≈ {measured['k']}, {measured['tokens_per_round']:.2f} tokens per round)."
    return fig, line, profile_figure(dict(profile.verify_s) if profile is not None else {})


def theory_from_run(state: SessionState | None) -> tuple[Any, Any]:
    """The last run's measured α (of evaluated drafts) and c, for the sliders."""
    run = _last_run(state)
    if run is None:
        return gr.skip(), gr.skip()
    s = run.summary()
    if math.isnan(s["alpha_eval"]) or math.isnan(s["c"]):
        return gr.skip(), gr.skip()
    return round(min(0.99, s["alpha_eval"]), 2), round(min(1.0, s["c"]), 2)


def budget_line() -> str:
    """The server's memory budget for what sessions keep (ui/budget.py), as the tab states it."""
    return (
        f"This server keeps what sessions hold (each one's latest run's trace, step-through run, downloads and "
        f"suffix decoding's memory of earlier runs, and every upload) within one memory budget of "
        f"**{settings.read().session_mb:,.0f} MB** for all sessions together (`PLAYGROUND_SESSION_MB`); over it, "
        f"the least recently used goes first and its session's next status line says so."
    )


def build(state: gr.State) -> None:
    """The tab's widgets and events (inside a gr.Tab)."""
    gr.Markdown(
        "Leviathan et al.'s expected tokens per round (1 − α^(k+1)) / (1 − α) and speedup "
        "(1 − α^(k+1)) / ((1 − α)(k c + v)) for an acceptance rate α and a draft cost c (one draft step / "
        "one target step). Their ideal assumes v = 1 (checking k + 1 tokens costs one target step); after a "
        "run, the dashed curve uses this machine's measured v(k) = V(k + 1) / V(1), drawn below. "
        "The diamond is your last run. Each draft token x is kept when u < min(1, q(x)/p(x)): here q is the "
        "target's probability and p the draft's (Chen et al.'s letters; Leviathan et al. swap them)."
    )
    gr.Markdown(budget_line(), elem_id="theory-budget")
    with gr.Row():
        # checked_by_us: an API value that is not a number in range gets theory_view's message naming α or c
        alpha = checked_by_us(
            gr.Slider(0, ALPHA_MAX, value=0.7, step=0.01, label="α (acceptance rate)", elem_id="theory-alpha")
        )
        c = checked_by_us(gr.Slider(0, 1, value=0.2, step=0.01, label="c (draft cost per token)", elem_id="theory-c"))
        from_run = gr.Button("Use the last run's α and c", elem_id="theory-from-run")
    line = gr.Markdown("", elem_id="theory-line")
    plot = gr.Plot(theory_figure(0.7, 0.2), show_label=False, elem_id="chart-theory")
    profile = gr.Plot(profile_figure({}), show_label=False, elem_id="chart-profile")
    view = dict(
        fn=theory_view,
        inputs=[alpha, c, state],
        outputs=[plot, line, profile],
        concurrency_limit=None,
        show_progress="hidden",
    )
    alpha.release(**view, api_name="theory")
    c.release(**view, api_visibility="undocumented")  # the same endpoint as "theory"
    from_run.click(
        theory_from_run, inputs=state, outputs=[alpha, c], concurrency_limit=None, api_visibility="undocumented"
    ).then(**view, api_visibility="undocumented")
