"""The Run tab: generate (streamed round by round), stop, the summary and the comparison panels.

The callbacks are plain functions of the runner, the session state and the shared controls' values;
`build` draws the tab and wires them. Every number shown comes from trace.summarize. The comparison with the
target alone runs interleaved with the speculative run (runner.Session.compare), so that both share the machine's
load; c, v and the predictions are then this run's own, with the spread between its segments.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Iterator

import gradio as gr

from playground import trace
from playground.trace.replay import RecordingTokenizer
from playground.core.progress import Progress, quiet
from playground.core.records import RoundRecord
from playground.run.runner import Runner, Session, encode_prompt
from playground.run.startup import Startup
from playground.ui import jobs, recorded_runs
from playground.ui.common import (
    DECODING,
    Controls,
    View,
    error_status,
    gpu,
    gradio_progress,
    read_spec,
    status_html,
    unchanged,
)
from playground.ui.run_view import final_view, in_panel, panels, tree_panel
from playground.ui.state import CurrentRun, SessionState
from playground.views import charts, draftfree, race, tokens

TEXT_EVERY_S = 0.1  # send the text at most this often (every round when rounds are slower)
CHART_EVERY_S = 1.0  # redraw the charts and the summary at most this often while a run streams
STOP_SETTLE_S = 0.25  # Stop waits this long so that its view is the last one


class _Stopped(Exception):
    pass


# ---------------------------------------------------------------- callbacks


def generate(
    runner: Runner,
    state: SessionState | None,
    controls: Controls,
    compare: bool,
    progress: Progress = quiet,
    listener: jobs.Listener | None = None,
    startup: Startup | None = None,
) -> Iterator[View]:
    """Load (cached), warm up (once per model and drafter, by the runner), run the speculative decoder
    round by round and, when asked, the target alone; stream it all, then the final view. With a listener
    (the job in Gradio's queue), the run ends at the next round once nobody listens. While the app's start-up
    still prepares the pair this run needs, it waits for it, saying what it waits for."""
    state = state if state is not None else SessionState()
    runner = jobs.Watched(runner, listener) if listener is not None else runner
    try:
        spec = read_spec(controls)
        run = state.run = CurrentRun(spec, comparing=bool(compare))  # from now on Stop finds this run
        if listener is not None and listener.queued_before(state.stopped_at):  # Stop came while it waited
            run.finished = True
            yield unchanged(status=status_html(jobs.BEFORE_START, "info"))
            return
        for message in startup.wait(spec) if startup is not None else ():
            yield unchanged(status=status_html(f"Waiting for the start-up to prepare this pair: {message}", "busy"))
        # the pair stays in use until the session ends
        with runner.session(spec, progress, state.kept(spec.drafter.kind), prefix=True) as session:
            for event in session:  # the load, then (once per model and drafter) the warm-up
                if event.step == "load":
                    yield unchanged(
                        status=status_html(event.message + " …", "busy"),
                        tokens=tokens.empty_output("Waiting for the first round …"),
                        compare="",
                        summary="",
                        tree="",
                        csv=gr.update(value=None, interactive=False),
                        json=gr.update(value=None, interactive=False),
                    )
                    continue
                _loaded(run, session)
                if run.stopped:
                    return
                yield unchanged(status=status_html(event.message + " …", "busy"))
            _loaded(run, session)
            if run.stopped:
                return
            run.profile = session.profile()
            if compare:  # both sides in alternating segments, sharing the machine's load (Session.compare)
                yield from _stream(run, session.compare())
                run.segments = list(session.segments)
            else:
                yield from _stream(run, ((False, record) for record in session.rounds()))
        run.finished = True
        summary = trace.summarize(run.rounds)
        yield final_view(run, state, done_line(summary, _stop_reason(run)), "ok")
    except _Stopped:  # Stop has shown the partial run: send nothing after it
        return
    except jobs.ClientGone as exc:  # nobody listens; a REST client that reads late learns why it ended
        yield unchanged(status=status_html(str(exc), "info"))
    except Exception as exc:  # a PlaygroundError names the field; anything else in one line, and keep serving
        yield unchanged(status=error_status(exc))


def _loaded(run: CurrentRun, session: Session) -> None:
    """What the loaded pair tells the run: the tokenizer (recording the texts it shows, for the trace: recorded.py),
    the precisions and kernels that run."""
    if run.tokenizer is None:
        pair = session.pair
        run.tokenizer = RecordingTokenizer(pair.tokenizer)
        run.target_precision = pair.target_precision.value
        run.draft_precision = pair.draft_precision.value if pair.draft_precision else None
        run.invariant = session.invariant
        run.prompt_tokens = encode_prompt(pair.tokenizer, run.spec.prompt, run.spec.chat).shape[1]


def _stream(run: CurrentRun, rounds: Iterator[tuple[bool, RoundRecord]]) -> Iterator[View]:
    """Show each round as it comes, (is_baseline, record): the speculative run in the token box (with the summary
    and the charts every CHART_EVERY_S), the target alone's, interleaved with it, in the comparison panel."""
    spans: dict[bool, list[str]] = {False: [], True: []}
    contexts: dict[bool, list[int]] = {False: [], True: []}
    last_text = {False: 0.0, True: 0.0}
    last_chart = time.monotonic()  # the first tokens go out alone: the charts take a while to build and to draw
    for baseline, record in rounds:
        into = run.baseline if baseline else run.rounds
        into.append(record)
        run.nbytes()  # the budget's count grows with each round: the end's count then has nothing left to add
        if run.stopped:
            raise _Stopped
        spans[baseline].append(tokens.round_spans(record, run.tokenizer, contexts[baseline]))
        now = time.monotonic()
        if now - last_text[baseline] < TEXT_EVERY_S and not record.stop:
            yield unchanged()  # rounds faster than a browser repaints: nothing new this time (Stop can still cancel here)
            continue
        last_text[baseline] = now
        text = tokens.wrap("".join(spans[baseline]), run.spec.prompt) + ("" if baseline else draftfree.legend(into))
        label = "Target alone" if baseline else "Speculative"
        interleaved = " (interleaved with the other, segment by segment)" if run.comparing else ""
        message = status_html(
            f"{label}: round {record.round + 1}, {record.total_new} / {run.spec.decode.max_new_tokens} tokens"
            f"{interleaved} …",
            "busy",
        )
        if baseline:
            yield unchanged(status=message, compare=f'<div class="compare"><h4>Target alone (running)</h4>{text}</div>')
            continue
        view = unchanged(status=message, tokens=text, **({"tree": tree_panel(run)} if in_panel(record) else {}))
        if now - last_chart >= CHART_EVERY_S:
            summary, figures = panels(run)
            view = view._replace(
                summary=summary, **dict(zip(("acceptance", "latency", "histogram", "positions"), figures))
            )
            last_chart = time.monotonic()
        yield view


def stop(state: SessionState | None, withdrawn: int = 0) -> View:
    """The Stop button (the generate event is cancelled by `cancels=`): show what the run got so far.
    withdrawn: how many of the session's runs were taken out of the queue before they started; a run of the
    session that was waiting, and starts anyway, ends at once (state.stopped_at)."""
    if state is not None:
        state.stopped_at = time.monotonic()
    run = state.run if state is not None else None
    if withdrawn and (run is None or run.finished):
        return unchanged(status=status_html(jobs.BEFORE_START, "info"))
    if run is not None and run.finished:
        return unchanged()  # nothing is running: keep the finished run as shown
    if run is not None:
        run.stopped = True
        time.sleep(STOP_SETTLE_S)  # let an update computed before the flag leave first
    if run is None or not run.rounds:
        return unchanged(status=status_html("Stopped.", "info"))
    run.rounds = list(run.rounds)  # a snapshot: the decoder may still finish the round it was in
    where = ""
    if run.baseline and not run.baseline_done:  # an unfinished baseline cannot be compared
        run.baseline, where = [], " during the target-alone comparison (no comparison)"
    count = sum(len(r.new_tokens) for r in run.rounds)
    return final_view(run, state, f"Stopped{where}: {count} tokens in {len(run.rounds)} rounds so far.", "info")


def done_line(summary: dict, reason: str) -> str:
    """The status line of a finished run: tokens, rounds, why it ended and the time to first token."""
    ttft = summary["ttft_s"]
    first = f", first token after {ttft:.2f} s" if ttft == ttft else ""  # NaN (no round): nothing to say
    return f"Done: {summary['tokens']} tokens in {summary['rounds']} rounds ({reason}){first}."


def _stop_reason(run: CurrentRun) -> str:
    reason = run.rounds[-1].stop if run.rounds else ""
    return {"eos": "end of text", "length": "token limit"}.get(reason, "stopped")


# ---------------------------------------------------------------- layout


def startup_line(startup: Startup | None) -> tuple[str, Any]:
    """The start-up's status line (empty once there is nothing to say) and whether its timer keeps ticking."""
    snap = startup.snapshot() if startup is not None else None
    if snap is None or snap.phase == "off":
        return "", gr.Timer(active=False)
    level = {"ready": "ok", "failed": "error"}.get(snap.phase, "busy")
    text = f"Start-up, {snap.seconds:.0f} s: {snap.message}" if snap.busy else snap.message
    return status_html(text, level), gr.Timer(active=snap.busy)


def build(
    runner: Runner, controls: Controls, state: gr.State, startup: Startup | None = None
) -> tuple[list, gr.Checkbox]:
    """The tab's widgets and events (inside a gr.Tab); returns its outputs (View's order) and the comparison box."""
    with gr.Row():
        run_btn = gr.Button("Generate", variant="primary", elem_id="generate")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="stop")
        # ticked: the first Generate shows the measured speedup, the same-text check and the race replay
        compare = gr.Checkbox(True, label="Compare with target alone", elem_id="compare-box")
    upload, too_large, gallery = recorded_runs.layout()
    _startup_line(startup)
    outputs = _run_outputs()
    recorded_runs.wire(upload, too_large, gallery, controls, state, compare, outputs)
    _wire_run(runner, controls, state, startup, compare, run_btn, stop_btn, outputs)
    return outputs, compare


def _startup_line(startup: Startup | None) -> None:
    """The start-up's progress: a timer fills the line within a second of a page load, until the pair is ready."""
    line = gr.HTML("", elem_id="startup")
    timer = gr.Timer(1.0, active=startup is not None)
    timer.tick(
        lambda: startup_line(startup),
        outputs=[line, timer],
        show_progress="hidden",
        concurrency_limit=None,
        api_visibility="private",
        queue=False,
    )


def _run_outputs() -> list:
    """The run's view, top to bottom: the status line, the coloured text, the comparison, the summary and the
    downloads, the charts; in View's order."""
    status = gr.HTML(
        status_html("Press Generate (the prompt box holds an example), or open a recorded run."), elem_id="status"
    )
    gr.HTML(tokens.legend(), elem_id="legend")
    text = gr.HTML(tokens.empty_output(), elem_id="tokens")
    tree = gr.HTML("", elem_id="tree")  # the latest round of a token-tree run
    comparison = gr.HTML("", elem_id="compare", js_on_load=race.PLAYER_JS)  # the replay race plays in the page
    with gr.Row(equal_height=False):
        summary = gr.Markdown("", elem_id="summary")
        with gr.Column(scale=0, min_width=200):
            csv_btn = gr.DownloadButton("Trace as CSV", interactive=False, elem_id="download-csv")
            json_btn = gr.DownloadButton("Trace as JSON", interactive=False, elem_id="download-json")
    empty = charts.all_charts(trace.frame([]))
    with gr.Column(elem_id="charts"):
        with gr.Row():
            acceptance = gr.Plot(empty[0], show_label=False, elem_id="chart-acceptance")
            latency = gr.Plot(empty[1], show_label=False, elem_id="chart-latency")
        with gr.Row():
            histogram = gr.Plot(empty[2], show_label=False, elem_id="chart-histogram")
            positions = gr.Plot(empty[3], show_label=False, elem_id="chart-positions")
    return list(
        View(status, text, comparison, summary, acceptance, latency, histogram, positions, tree, csv_btn, json_btn)
    )


def _wire_run(
    runner: Runner,
    controls: Controls,
    state: gr.State,
    startup: Startup | None,
    compare: gr.Checkbox,
    run_btn: gr.Button,
    stop_btn: gr.Button,
    outputs: list,
) -> None:
    """Generate (streamed, through the device queue) and Stop."""
    status = outputs[0]

    def on_generate(progress: Any = gr.Progress(), request: gr.Request = None, *values: Any) -> Iterator[View]:
        *shared, compare_value, session = values  # the order of `inputs` below
        try:
            yield from generate(
                runner,
                session,
                Controls.of(*shared),
                compare_value,
                gradio_progress(progress),
                jobs.Listener(request),
                startup,
            )
        finally:
            jobs.forget_updates(request)  # the streamed updates' leftovers (Gradio keeps them per session)

    async def on_stop(session: SessionState | None, request: gr.Request = None) -> View:
        # first (on the event loop) the session's waiting runs leave the queue, answered "Stopped before it started."
        # (the browser's own cancel then finds nothing left to cancel: no "Error")
        withdrawn = await jobs.withdraw(request, "generate", list(unchanged(status=status_html(jobs.BEFORE_START))))
        return await asyncio.to_thread(stop, session, withdrawn)

    inputs = controls.as_inputs() + [compare, state]
    running = run_btn.click(
        gpu(on_generate),
        inputs=inputs,
        outputs=outputs,
        api_name="generate",
        validator=jobs.admission(inputs, shown_on=controls.prompt),
        concurrency_id=DECODING,
        show_progress="minimal",
        show_progress_on=[status],
    )  # "queue: n/m" while it waits
    stop_btn.click(
        on_stop,
        inputs=state,
        outputs=outputs,
        cancels=[running],
        show_progress="hidden",
        concurrency_limit=None,
        api_name="stop",
    )
