"""The Challenges tab: why speculative decoding disappoints in deployment, measured live on the pair on the left.
One effect at a time (batch size, context length, precision; bench.challenges), drawn beside the published
figures with the mechanism in a paragraph, a progress bar while it runs, a table and a CSV download, and Stop."""

from __future__ import annotations

from typing import Any

import gradio as gr
import pandas as pd

from playground.bench import challenges
from playground.core.errors import PlaygroundError, shown
from playground.core.progress import Progress, quiet
from playground.run.runner import Runner
from playground.core.config import KPolicy, Precision, TARGET_PRECISIONS
from playground.core.inputs import parse_list
from playground.run.spec import parse_precisions
from playground.ui import jobs
from playground.ui.common import (
    DECODING,
    Controls,
    checked_by_us,
    error_status,
    gpu,
    gradio_progress,
    read_spec,
    status_html,
)
from playground.ui.state import SessionState
from playground.ui.sweep_tab import grid_download
from playground.views import challenges as views

MAX_SIZES = 6  # distinct batch sizes or context lengths per request
MAX_UI_BATCH = 16
MAX_CONTEXT = 32768
MAX_CELLS = 16  # precision grid cells per request
FIGURES = {
    views.BATCH: views.batch_figure,
    views.CONTEXT: views.context_figure,
    views.PRECISION: views.precision_figure,
}
ELEM = {views.BATCH: "batch", views.CONTEXT: "context", views.PRECISION: "precision"}


def explanation(effect: str, found: str = "") -> str:
    """The text beside the chart: what this run found (once it ran), the published figures, the mechanism."""
    if effect not in views.EFFECTS:
        effect = views.BATCH
    head = f"**This run:** {found}\n\n" if found else ""
    return head + views.REFERENCES[effect] + "\n\n" + views.MECHANISMS[effect]


def read_fields(
    batch_text: Any, context_text: Any, targets_text: Any, drafts_text: Any
) -> tuple[list, list, list, list]:
    """(batch sizes, context lengths, target precisions, draft precisions): every field is checked, the ones the
    chosen challenge does not use too, so that a wrong value is named whichever challenge runs."""
    sizes = parse_list(
        batch_text, "batch sizes", int, lambda b: 1 <= b <= MAX_UI_BATCH, f"whole numbers 1..{MAX_UI_BATCH}", MAX_SIZES
    )
    lengths = parse_list(
        context_text,
        "context lengths",
        int,
        lambda n: 8 <= n <= MAX_CONTEXT,
        f"whole numbers 8..{MAX_CONTEXT}",
        MAX_SIZES,
    )
    targets = parse_precisions(targets_text, "target precisions", TARGET_PRECISIONS)
    drafts = parse_precisions(drafts_text, "draft precisions", tuple(Precision))
    return sizes, lengths, targets, drafts


def run_challenge(
    runner: Runner,
    state: SessionState,
    controls: Controls,
    effect: str,
    batch_text: str,
    context_text: str,
    targets_text: str,
    drafts_text: str,
    progress: Progress = quiet,
) -> tuple:
    """(status, figure, explanation, table, CSV download) of one challenge with the shared pair, draft precision, k
    (fixed) and max new tokens; every run greedy. Every field is checked (range, memory budget, context window)
    before anything runs."""
    fail = lambda exc: (error_status(exc),) + (gr.skip(),) * 4
    try:
        if effect not in views.EFFECTS:
            raise PlaygroundError(f"Unknown challenge {shown(effect)}; choose one of {', '.join(views.EFFECTS)}.")
        spec = read_spec(controls.but(policy=KPolicy.FIXED.label, temperature=0.0, tree=""))  # chains of fixed k
        sizes, lengths, targets, drafts = read_fields(batch_text, context_text, targets_text, drafts_text)
        if effect == views.BATCH:
            frame = challenges.batch_sweep(runner, spec, sizes, progress=progress)
        elif effect == views.CONTEXT:
            frame = challenges.context_sweep(runner, spec, lengths, progress=progress)
        else:
            frame = challenges.precision_grid(runner, spec, targets, drafts, progress, max_cells=MAX_CELLS)
    except Exception as exc:
        return fail(exc)
    found = views.headline(effect, frame)
    name = f"challenge-{ELEM[effect]}.csv"
    return (
        status_html(f"Done: {found}", "ok"),
        FIGURES[effect](frame),
        explanation(effect, found),
        frame.round(4),
        grid_download(frame, state, name),
    )


def on_effect(effect: str) -> tuple:
    """Another effect picked: its empty chart and its explanation."""
    return FIGURES.get(effect, views.batch_figure)(pd.DataFrame()), explanation(effect)


def build(runner: Runner, controls: Controls, state: gr.State) -> None:
    """The tab's widgets and events (inside a gr.Tab)."""
    gr.Markdown(
        "Why speculative decoding disappoints in deployment, measured here: batch size, context length and "
        "precision, with the pair, draft precision, k (fixed) and max new tokens on the left; every run greedy, "
        "every output checked against the target alone's."
    )
    effect = checked_by_us(
        gr.Radio(list(views.EFFECTS), value=views.BATCH, label="Challenge", elem_id="challenge-effect")
    )
    with gr.Row():
        batch = gr.Textbox(
            "1 2 4 8", label=f"Batch sizes (batch size; up to {MAX_UI_BATCH})", elem_id="challenge-batch"
        )
        context = gr.Textbox(
            "64 256 1024 2048", label="Context lengths in tokens (context length)", elem_id="challenge-context"
        )
        targets = gr.Textbox(
            " ".join(challenges.default_precisions()[0]),
            label="Target precisions (precision)",
            elem_id="challenge-targets",
        )
        drafts = gr.Textbox(
            " ".join(challenges.default_precisions()[1]),
            label="Draft precisions (precision)",
            elem_id="challenge-drafts",
        )
    with gr.Row():
        run_btn = gr.Button("Run challenge", variant="primary", elem_id="challenge-run")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="challenge-stop")
    status = gr.HTML("", elem_id="challenge-status")
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            plot = gr.Plot(views.batch_figure(pd.DataFrame()), show_label=False, elem_id="chart-challenge")
        with gr.Column(scale=2):
            text = gr.Markdown(explanation(views.BATCH), elem_id="challenge-explanation")
    table = gr.Dataframe(elem_id="challenge-table", interactive=False)
    csv = gr.DownloadButton("Results as CSV", interactive=False, elem_id="challenge-csv")

    def on_run(progress: Any = gr.Progress(), request: gr.Request = None, *values: Any) -> tuple:
        *shared, which, batch_text, context_text, targets_text, drafts_text, session = values  # the order of `inputs`
        listener = jobs.Listener(request, state=session, tab="challenge")  # Stop, or a client that left: next round
        return run_challenge(
            jobs.Watched(runner, listener),
            session,
            Controls.of(*shared),
            which,
            batch_text,
            context_text,
            targets_text,
            drafts_text,
            gradio_progress(progress, listener.check),
        )

    effect.change(
        on_effect,
        inputs=effect,
        outputs=[plot, text],
        show_progress="hidden",
        concurrency_limit=None,
        api_visibility="undocumented",
    )
    inputs = controls.as_inputs() + [effect, batch, context, targets, drafts, state]
    outputs = [status, plot, text, table, csv]
    running = run_btn.click(
        gpu(on_run),
        inputs=inputs,
        outputs=outputs,
        api_name="challenge",
        validator=jobs.admission(inputs, shown_on=controls.prompt),
        concurrency_id=DECODING,
        show_progress_on=[status],
    )
    # the API's /challenge_stop answered "Stopped." and the challenge ran on (issue 29.3): now it stops server-side
    jobs.wire_stop(stop_btn, "challenge", running, state, status, len(outputs), api_name="challenge_stop")
