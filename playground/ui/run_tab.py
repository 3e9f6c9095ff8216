"""The Run tab: generate (streamed round by round), stop, the summary and the comparison panels.

The callbacks are plain functions of the runner, the session state and the shared controls' values;
`build` draws the tab and wires them. Every number shown comes from trace.summarize, with the
runner's measured cost profile, so adding the target-alone comparison changes nothing but the
measured speedup.
"""
from __future__ import annotations

import asyncio
import html
import time
from dataclasses import asdict
from typing import Any, Iterator

import gradio as gr

from playground import decoding, models, trace
from playground.recorded import RecordingTokenizer, decoded_table
from playground.numbers import fmt
from playground.progress import Progress, quiet
from playground.records import StagedExtras
from playground.runner import Runner
from playground.startup import Startup
from playground.ui import jobs
from playground.ui.common import (DECODING, Controls, View, error_status, gpu, gradio_progress, read_spec, status_html,
                                  unchanged)
from playground.ui.state import CurrentRun, SessionState
from playground.views import charts, draftfree, race, tokens
from playground.views import tree as tree_view

TEXT_EVERY_S = 0.1  # send the text at most this often (every round when rounds are slower)
CHART_EVERY_S = 1.0  # redraw the charts and the summary at most this often while a run streams
STOP_SETTLE_S = 0.25  # Stop waits this long so that its view is the last one
SPEEDUPS = ("Leviathan ideal (v = 1)", "calibrated to this machine (measured v(k), this prompt's first pass)", "measured (target alone ran)")


class _Stopped(Exception):
    pass


# ---------------------------------------------------------------- callbacks

def generate(runner: Runner, state: SessionState | None, controls: Controls, compare: bool,
             progress: Progress = quiet, listener: jobs.Listener | None = None,
             startup: Startup | None = None) -> Iterator[View]:
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
        for message in (startup.wait(spec) if startup is not None else ()):
            yield unchanged(status=status_html(f"Waiting for the start-up to prepare this pair: {message}", "busy"))
        names = [models.display_name(m) for m in (spec.pair.target, spec.pair.draft if spec.drafter.needs_draft_model else None) if m]
        loading = "Loading " + " and ".join(names)
        yield unchanged(status=status_html(loading + " …", "busy"), tokens=tokens.empty_output("Waiting for the first round …"),
                        compare="", summary="", tree="", csv=gr.update(value=None, interactive=False),
                        json=gr.update(value=None, interactive=False))
        pair = runner.load(spec, progress)
        run.tokenizer = RecordingTokenizer(pair.tokenizer)  # the token texts shown go into the trace (recorded.py)
        run.target_precision = pair.target_precision.value
        run.draft_precision = pair.draft_precision.value if pair.draft_precision else None
        run.invariant = pair.use_kernels(spec.pair.invariant)
        if run.stopped:
            return
        with pair.in_use():  # the model cache never evicts a pair while it generates
            if not runner.is_warm(spec, pair):  # warms the target alone too
                yield unchanged(status=status_html("Warming up and measuring this machine's V(n) "
                                                   "(once per model and drafter) …", "busy"))
                runner.warm_up(spec, pair, progress)
            run.profile = runner.profile(spec, pair)
            yield from _stream(run, runner.rounds(spec, pair, progress, state.memory), run.rounds, "Speculative")
            if compare:  # the speculative run's complete figures first: the comparison will only add the speedup
                summary, figures = panels(run)
                yield unchanged(summary=summary, **dict(zip(("acceptance", "latency", "histogram", "positions"), figures)))
                yield from _stream(run, runner.rounds(spec.baseline(), pair, progress), run.baseline, "Target alone",
                                   baseline=True)
        run.finished = True
        summary = trace.summarize(run.rounds)
        yield final_view(run, state, f"Done: {summary['tokens']} tokens in {summary['rounds']} rounds "
                                     f"({_stop_reason(run)}).", "ok")
    except _Stopped:  # Stop has shown the partial run: send nothing after it
        return
    except jobs.ClientGone as exc:  # nobody listens; a REST client that reads late learns why it ended
        yield unchanged(status=status_html(str(exc), "info"))
    except Exception as exc:  # a PlaygroundError names the field; anything else in one line, and keep serving
        yield unchanged(status=error_status(exc))


def _stream(run: CurrentRun, rounds: Iterator, into: list, label: str, baseline: bool = False) -> Iterator[View]:
    """Show each round as it comes: the speculative run in the token box (with the summary and the
    charts every CHART_EVERY_S), the target-alone run in the comparison panel."""
    spans: list[str] = []
    context: list[int] = []
    last_text = last_chart = 0.0
    for record in rounds:
        into.append(record)
        if run.stopped:
            raise _Stopped
        spans.append(tokens.round_spans(record, run.tokenizer, context))
        now = time.monotonic()
        if now - last_text < TEXT_EVERY_S and not record.stop:
            yield unchanged()  # rounds faster than a browser repaints: nothing new this time (Stop can still cancel here)
            continue
        last_text = now
        text = tokens.wrap("".join(spans), run.spec.prompt) + ("" if baseline else draftfree.legend(into))
        message = status_html(f"{label}: round {record.round + 1}, {record.total_new} / "
                              f"{run.spec.decode.max_new_tokens} tokens …", "busy")
        if baseline:
            yield unchanged(status=message, compare=f'<div class="compare"><h4>Target alone (running)</h4>{text}</div>')
            continue
        shown = record.is_tree or draftfree.is_draftfree(record) and record.k > 0
        view = unchanged(status=message, tokens=text, **({"tree": tree_panel(run)} if shown else {}))
        if now - last_chart >= CHART_EVERY_S:
            summary, figures = panels(run)
            view = view._replace(summary=summary, **dict(zip(("acceptance", "latency", "histogram", "positions"), figures)))
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


# ---------------------------------------------------------------- the views of a run

def panels(run: CurrentRun) -> tuple[str, tuple]:
    """The summary panel and the four charts: the same function while streaming and at the end."""
    return summary_markdown(run.summary(), run), charts.all_charts(trace.frame(run.rounds))


def final_view(run: CurrentRun, state: SessionState, message: str, level: str) -> View:
    """Everything at the end of a run (or when stopped): text, comparison, summary, charts, downloads."""
    spec_html = tokens.render_rounds(run.rounds, run.tokenizer, run.spec.prompt) + draftfree.legend(run.rounds)
    comparison = compare_html(run, spec_html) + race_view(run) if run.baseline_done else ""
    summary, (acc, lat, hist, pos) = panels(run)
    csv_path, json_path = write_trace(run, state) if run.rounds else (None, None)
    return View(status=status_html(message, level), tokens=spec_html, compare=comparison, summary=summary,
                acceptance=acc, latency=lat, histogram=hist, positions=pos, tree=tree_panel(run),
                csv=gr.update(value=csv_path, interactive=csv_path is not None),
                json=gr.update(value=json_path, interactive=json_path is not None))


def tree_panel(run: CurrentRun) -> str:
    """The latest token-tree round of the run as a tree (views.tree.tree_html), after what a draft-free strategy
    did in it (views.draftfree: the match, the window); "" for a chain run of the other strategies."""
    drafted = lambda r: r.is_tree or (r.k > 0 and draftfree.is_draftfree(r))
    at = next((i for i in range(len(run.rounds) - 1, -1, -1) if drafted(run.rounds[i])), None)
    if at is None:
        return ""
    record = run.rounds[at]
    context = [t for r in run.rounds[:at] for t in r.new_tokens]  # the output before that round
    about = draftfree.explain_html(record, run.tokenizer, context)
    heading = f"<h4>Round {record.round + 1}, the latest that drafted</h4>" if about else ""
    return heading + about + (tree_view.tree_html(record, run.tokenizer, context) if record.is_tree else "")


def race_view(run: CurrentRun) -> str:
    """The replay race of a compared run: each token at the moment its round ended in its own measured run."""
    return race.race_html(run.rounds, run.baseline, run.tokenizer, run.spec.prompt,
                          f"Speculative ({run.spec.drafter.label})")


def precisions(run: CurrentRun) -> str:
    """What ran: "target bf16 · draft int8" (the drafter's Strategy.ran)."""
    draft = decoding.strategy(run.spec.drafter.kind).ran.format(draft=run.draft_precision, target=run.target_precision)
    kernels = " (batch-invariant kernels)" if run.invariant else ""
    return " · ".join(p for p in (f"target {run.target_precision}{kernels}", draft) if p)


def summary_markdown(s: dict, run: CurrentRun) -> str:
    """The summary panel: the three speedups side by side, each with what it assumes; then the measures."""
    k = max(1, round(s["mean_k"])) if s["mean_k"] else None
    measured = fmt(s["speedup"], 2, "×") if run.baseline_done else "– (tick *Compare with target alone*)"
    speedups = (f"**Speedup over the target alone** (k = {fmt(k)}, α of evaluated drafts = {fmt(s['alpha_eval'], 3)})\n\n"
                f"| {' | '.join(SPEEDUPS)} |\n|---|---|---|\n"
                f"| **{fmt(s['theory_speedup'], 2, '×')}** | **{fmt(s['calibrated_speedup'], 2, '×')}** | **{measured}** |")
    base = f" (target alone: {fmt(s['baseline_tokens_per_s'], 1)})" if run.baseline_done else ""
    source = "V(1) measured by the runner on this machine" if s["step_source"] == "measured" else s["step_source"]
    rows = [
        ("tokens/s", fmt(s["tokens_per_s"], 1) + base),
        ("time to first token (the prompt's passes and the first round)", fmt(s["ttft_s"], 2, " s")),
        ("precisions that ran", precisions(run)),
        ("α acceptance (accepted / drafted)", fmt(s["alpha"], 3)),
        ("mean accepted tokens per round", fmt(s["mean_accepted"], 2)),
        ("tokens per round", fmt(s["tokens_per_round"], 2)),
        (f"c, draft cost per token in target steps (target step: {source or '–'})", fmt(s["c"], 3)),
        ("v, verify cost per round in target steps", fmt(s["v"], 2)),
        ("best k, calibrated model (this α, c and the measured v(k))", fmt(s["best_k_calibrated"])),
        ("best k, Leviathan ideal (v = 1)", fmt(s["best_k"])),
        ("rounds · tokens · time", f"{s['rounds']} · {s['tokens']} · {fmt(s['wall_s'], 2, ' s')}"),
    ]
    by_source = trace.kept_by_source(run.rounds)
    if by_source:  # a draft-free strategy: where its kept drafts came from
        rows.insert(5, ("kept drafts by source", " · ".join(f"{draftfree.SOURCES.get(k, ('', k))[1]}: {n}"
                                                          for k, n in by_source.items())))
    if any(isinstance(r.extras, StagedExtras) for r in run.rounds):  # staged: the first level, lookup for the draft model
        rows.insert(5, ("staged: lookup tokens the draft model kept · its passes per drafted token",
                        f"{s['stage_accepted']} of {s['stage_proposed']} · "
                        f"{fmt(s['stage_passes'] / s['drafted'] if s['drafted'] else None, 2)}"))
    table = "| measure | value |\n|---|---|\n" + "\n".join(f"| {name} | **{value}** |" for name, value in rows)
    return speedups + "\n\n" + table


def comparison_verdict(run: CurrentRun) -> tuple[str, str]:
    """(message, level) of the speculative output against the target alone's."""
    if run.spec.decode.temperature > 0:
        return ("Sampling (temperature > 0): both follow the target's distribution, but the random draws differ, "
                "so the texts need not match."), "info"
    result = trace.compare_outputs(run.rounds, run.baseline, run.target_precision, exact=run.invariant)
    if result["equal"]:
        return "Identical outputs: greedy speculative decoding reproduced the target exactly.", "ok"
    at = result["position"]
    gaps = [g for g in (result["gap_spec"], result["gap_base"]) if g == g]
    gap = fmt(min(gaps), 3) if gaps else "not recorded"
    if run.invariant:  # a position's logits are the same in every pass: any difference is a bug
        return (f"The outputs differ from token {at} on (top-2 logit gap {gap}). With the batch-invariant kernels "
                f"every position gets the same logits in a pass of 1 and of k + 1 tokens, so this is a bug: please "
                f"report it with the trace JSON."), "error"
    if result["near_tie"]:
        return (f"The outputs are identical up to token {at}, where the target's top-2 logit gap was {gap}: a near-tie "
                f"that {run.target_precision} rounding can flip with torch's stock kernels (the pass of k + 1 tokens "
                f"and the pass of 1 round differently). From there the two continue differently. Tick "
                f"*Exact numerics* to give every position the same logits in every pass."), "info"
    return (f"The outputs differ from token {at} on, and the target's top-2 logit gap there was {gap}: not a near-tie, "
            f"so this is not rounding."), "error"


def compare_html(run: CurrentRun, spec_html: str) -> str:
    """Both texts side by side with their speeds, under the verdict."""
    spec, base = trace.summarize(run.rounds), trace.summarize(run.baseline)
    verdict, level = comparison_verdict(run)
    base_html = tokens.render_rounds(run.baseline, run.tokenizer, run.spec.prompt)
    drafter = html.escape(run.spec.drafter.label)
    return (f'<div class="compare">{status_html(verdict, level)}<div class="compare-cols">'
            f'<div class="compare-col"><h4>Speculative ({drafter}) · {fmt(spec["tokens_per_s"], 1)} tokens/s</h4>{spec_html}</div>'
            f'<div class="compare-col"><h4>Target alone · {fmt(base["tokens_per_s"], 1)} tokens/s</h4>{base_html}</div>'
            f"</div></div>")


def write_trace(run: CurrentRun, state: SessionState) -> tuple[str, str]:
    """trace.csv and trace.json in the session's download folder (only for a finished or stopped run)."""
    spec = run.spec
    meta = {"recorded_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "pair": spec.pair.name, "target": spec.pair.target,
            "draft": spec.pair.draft if spec.drafter.needs_draft_model else None,
            "drafter": spec.drafter.kind.value, "exit_layer": spec.drafter.exit_layer,
            "target_precision": run.target_precision, "draft_precision": run.draft_precision,
            "invariant": run.invariant,
            "chosen_precisions": [p.value if p else None for p in (spec.pair.target_precision, spec.drafter.precision)],
            "config": asdict(spec.decode), "prompt": spec.prompt}
    baseline = run.baseline if run.baseline_done else None  # the summary is the panel's: same rounds, baseline, profile
    csv_path, json_path = state.downloads.write({"trace.csv": trace.to_csv(run.rounds),
                                                 "trace.json": trace.to_json(run.rounds, baseline, run.profile,
                                                                             decoded_table(run.tokenizer), **meta)})
    return csv_path, json_path


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


def build(runner: Runner, controls: Controls, state: gr.State,
          startup: Startup | None = None) -> tuple[list, gr.Checkbox]:
    """The tab's widgets and events (inside a gr.Tab); returns its outputs (View's order) and the comparison box."""
    with gr.Row():
        run_btn = gr.Button("Generate", variant="primary", elem_id="generate")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="stop")
        compare = gr.Checkbox(False, label="Compare with target alone", elem_id="compare-box")
    from playground.ui import recorded_runs  # it shows a run through final_view, below

    upload, gallery = recorded_runs.layout()
    line = gr.HTML("", elem_id="startup")  # the start-up's progress: the timer fills it within a second of a page load
    timer = gr.Timer(1.0, active=startup is not None)
    timer.tick(lambda: startup_line(startup), outputs=[line, timer], show_progress="hidden", concurrency_limit=None,
               api_visibility="private", queue=False)
    status = gr.HTML(status_html("Press Generate (the prompt box holds an example), or open a recorded run."),
                     elem_id="status")
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
    outputs = list(View(status, text, comparison, summary, acceptance, latency, histogram, positions, tree, csv_btn,
                        json_btn))

    def on_generate(progress: Any = gr.Progress(), request: gr.Request = None, *values: Any) -> Iterator[View]:
        *shared, compare_value, session = values  # the order of `inputs` below
        try:
            yield from generate(runner, session, Controls(*shared), compare_value, gradio_progress(progress),
                                jobs.Listener(request), startup)
        finally:
            jobs.forget_updates(request)  # the streamed updates' leftovers (Gradio keeps them per session)

    async def on_stop(session: SessionState | None, request: gr.Request = None) -> View:
        # first (on the event loop) the session's waiting runs leave the queue, answered "Stopped before it started."
        # (the browser's own cancel then finds nothing left to cancel: no "Error")
        withdrawn = await jobs.withdraw(request, "generate", list(unchanged(status=status_html(jobs.BEFORE_START))))
        return await asyncio.to_thread(stop, session, withdrawn)

    recorded_runs.wire(upload, gallery, controls, state, compare, outputs)
    inputs = controls.as_inputs() + [compare, state]
    running = run_btn.click(gpu(on_generate), inputs=inputs, outputs=outputs, api_name="generate",
                            validator=jobs.admission(inputs, shown_on=controls.prompt), concurrency_id=DECODING,
                            show_progress="minimal", show_progress_on=[status])  # "queue: n/m" while it waits
    stop_btn.click(on_stop, inputs=state, outputs=outputs, cancels=[running], show_progress="hidden",
                   concurrency_limit=None, api_name="stop")
    return outputs, compare


