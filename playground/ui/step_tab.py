"""The Step-through tab: one round at a time with the shared settings, each round explained
(views.step.explain_round): p and q of every proposed token, the verdict, the residual; a suffix or lookahead
round first says where its draft came from (views.draftfree)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground.core.errors import Ended
from playground.core.progress import Progress, quiet
from playground.run.runner import Runner
from playground.ui import jobs
from playground.ui.common import DECODING, Controls, error_status, gpu, gradio_progress, read_spec, status_html
from playground.ui.state import SessionState, StepThrough
from playground.views import draftfree, tokens
from playground.views import tree as tree_view
from playground.views.step import explain_round

EXPLAIN_TOP = 4  # alternatives shown per position

Outputs = tuple[str, Any, Any]  # (status, the text so far, the round's explanation)


def step_start(
    runner: Runner,
    state: SessionState,
    controls: Controls,
    progress: Progress = quiet,
    listener: jobs.Listener | None = None,
) -> Outputs:
    """Start a step-through run with the shared settings (loaded and warm, no round run yet). With a listener (the
    job in Gradio's queue), Stop or a client that left ends the loading and warm-up at their next report."""
    try:
        spec = read_spec(controls, explain=EXPLAIN_TOP)
        with runner.session(spec, progress, state.kept(spec.drafter.kind)) as session:
            decoder = session.decoder()
        pair = session.pair
        if listener is not None:
            listener.check()  # Stop came while it loaded: no run is left behind
    except Exception as exc:
        return error_status(exc), gr.skip(), gr.skip()
    state.step = StepThrough(spec, pair, decoder)
    state.charge("step")  # the budget for what sessions keep (ui/budget.py) may drop older things
    return (
        status_html(_with_news("Ready: press Next round to run the first round.", state), "info"),
        tokens.empty_output("Press Next round."),
        "",
    )


def step_next(state: SessionState | None, listener: jobs.Listener | None = None) -> Outputs:
    """Run one round of the step-through run and explain it (none when Stop came while it waited)."""
    try:
        if listener is not None:
            listener.check()
    except Ended as exc:
        return error_status(exc), gr.skip(), gr.skip()
    step = state.step if state is not None else None
    if step is None:
        return status_html(_with_news("Press Start step-through first.", state), "error"), gr.skip(), gr.skip()
    if step.decoder.done:
        return (
            status_html("This run is finished: press Start step-through for a new one.", "info"),
            gr.skip(),
            gr.skip(),
        )
    try:
        before = list(step.context)
        with step.pair.in_use():
            record = step.decoder.step()
    except Exception as exc:
        return error_status(exc), gr.skip(), gr.skip()
    step.context.extend(record.new_tokens)
    text = tokens.render_rounds(step.decoder.rounds, step.tokenizer, step.spec.prompt)
    about = draftfree.explain_html(record, step.tokenizer, before)  # suffix, lookahead: the match, the window
    if record.is_tree:  # a token-tree round: the tree, its kept path and its rejected branches
        explanation = about + tree_view.tree_html(record, step.tokenizer, before)
    else:
        explanation = about + explain_round(record, step.tokenizer, before, step.spec.decode.sampling.greedy)
    reason = {"eos": "end of text", "length": "token limit"}.get(record.stop, "")
    end = f" Finished ({reason})." if record.stop else ""
    state.charge("step")
    return (
        status_html(
            _with_news(f"Round {record.round + 1}: {record.total_new} tokens so far.{end}", state),
            "ok" if record.stop else "info",
        ),
        text,
        explanation,
    )


def _with_news(message: str, state: SessionState | None) -> str:
    """The message, then what the sessions' budget dropped of this session since its last status line."""
    news = state.news() if state is not None else ""
    return f"{message} {news}" if news else message


def build(runner: Runner, controls: Controls, state: gr.State) -> None:
    """The tab's widgets and events (inside a gr.Tab)."""
    gr.Markdown(
        "One round at a time, with the settings on the left: what the drafter proposed, p (draft) and "
        "q (target) for each proposed token and its likeliest alternatives, the verdict, and on a "
        "rejection the residual the correction is drawn from."
    )
    with gr.Row():
        start_btn = gr.Button("Start step-through", variant="primary", elem_id="step-start")
        next_btn = gr.Button("Next round", elem_id="step-next")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="step-stop")
    status = gr.HTML(status_html("Press Start step-through."), elem_id="step-status")
    text = gr.HTML(tokens.empty_output("The text grows here, round by round."), elem_id="step-text")
    explanation = gr.HTML("", elem_id="step-round")
    outputs = [status, text, explanation]

    def on_start(progress: Any = gr.Progress(), request: gr.Request = None, *values: Any) -> Outputs:
        *shared, session = values  # the order of `inputs` below
        listener = jobs.Listener(request, state=session, tab="step")
        return step_start(runner, session, Controls.of(*shared), gradio_progress(progress, listener.check), listener)

    def on_next(session: SessionState | None, request: gr.Request = None) -> Outputs:
        return step_next(session, jobs.Listener(request, state=session, tab="step"))

    # each event is at most one round (or the load and warm-up): nothing runs between rounds without a click
    inputs = controls.as_inputs() + [state]
    starting = start_btn.click(
        gpu(on_start),
        inputs=inputs,
        outputs=outputs,
        api_name="step_start",
        concurrency_id=DECODING,
        validator=jobs.admission(inputs, shown_on=controls.prompt),
    )
    stepping = next_btn.click(
        gpu(on_next),
        inputs=state,
        outputs=outputs,
        api_name="step_next",
        concurrency_id=DECODING,
        validator=jobs.admission([state], shown_on=state),
    )
    # Stop: a waiting start or round never runs, a loading start ends at its next report, and the run is dropped
    jobs.wire_stop(
        stop_btn,
        "step",
        [starting, stepping],
        state,
        status,
        len(outputs),
        api_name="step_stop",
        then=lambda session: setattr(session, "step", None),
    )
