"""The Compare pairs tab: several catalog pairs and drafters on the same prompt and settings, each
against its own target alone (bench.run_grid; the run cap counts the whole request), and, when asked,
a vLLM engine beside them (vllm.peer: started here for the same pair, or a vLLM server by URL)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import gradio as gr
import pandas as pd

from playground import bench
from playground.vllm import peer as vllm_peer, report as vllm_report
from playground.core.errors import Ended, PlaygroundError
from playground.core.progress import Progress, quiet
from playground.run.runner import Runner
from playground.decoding import DRAFTERS
from playground.core.inputs import parse_names
from playground.ui import jobs, vllm_checks
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
from playground.ui.sweep_tab import grid_download, shown
from playground.views.grid import compare_figure, positions_figure

VLLM_NOTE = (
    "vLLM's rows (labelled *vLLM ...*) sit in the same charts as ours: tokens/s, acceptance, mean accepted tokens "
    "per round and acceptance by position from its spec-decode counters (`vllm:spec_decode_*`), speedup over "
    "**vLLM's own target alone**. Started here, vLLM runs the same pair, target precision, prompt tokens and k "
    "(its target alone, its draft model and, for prompt lookup, its ngram method; one engine each, minutes "
    "apiece for a real pair on a CPU). A server keeps its own speculative config; give a second server of the "
    "same model without one for its speedup. **The per-token colours (Run tab) are ours alone: vLLM exposes no "
    "per-token verdicts, only these counters.** Stop ends vLLM's engines too."
)


def run_compare(
    runner: Runner,
    state: SessionState,
    pair_names: list[str],
    drafter_names: list[str],
    controls: Controls,
    vllm: Sequence[str] = (),
    progress: Progress = quiet,
    should_stop: Callable[[], bool] | None = None,
    checked: bool = False,
    off_device: Callable[[], None] | None = None,
) -> tuple:
    """(status, bars, acceptance by position, table, CSV download) of every chosen pair x drafter with the shared
    settings (the custom model ids are not used here: each pair runs its own models, "draft model" through the
    drafter its tokenizers need: bench.grid.own_drafter). vllm: the tab's (source, URL, model, target-alone URL),
    vllm.peer.engine_choice; its engine is checked before anything of ours runs. The runner may be a
    jobs.Watched one: the comparison then ends at the next round once nobody listens, and vLLM's engine when
    should_stop() says so. checked: the event's validator has checked vLLM's engine already (vllm_checks: what it
    found goes to run_peer, which does not ask again), so that the device queue never waits on a server; off_device:
    called once our rows are done and a server's rows need only the network (the device queue then goes on)."""
    fail = lambda exc: (error_status(exc),) + (gr.skip(),) * 4
    try:
        pair_names, drafter_names = parse_names(pair_names, "Pairs"), parse_names(drafter_names, "Drafters")
        if not pair_names or not drafter_names:
            raise PlaygroundError("Pick at least one pair and one drafter to compare.")
        specs = [
            read_spec(controls.but(pair=p, drafter=d, draft_id="", target_id=""))
            for p in pair_names
            for d in drafter_names
        ]  # validates every choice
        pairs = list(dict.fromkeys(s.pair for s in specs))
        drafters = list(dict.fromkeys(s.drafter for s in specs))
        first = specs[0]
        engine = vllm_peer.engine_choice(*vllm) if vllm else None
        if engine is not None and not checked:
            vllm_peer.check(engine, should_stop)  # a missing environment or a bad server is said before our runs
        prompts = {"prompt": first.prompt}
        results = bench.run_grid(
            runner, pairs, prompts, [first.decode], drafters, max_cells=bench.MAX_CELLS, progress=progress
        )  # the cap counts the whole request
    except Exception as exc:
        return fail(exc)
    done = status_html(f"Comparison done: {len(pairs)} pair(s) × {len(drafters)} drafter(s).", "ok")
    if engine is not None:
        try:
            rows, _ = vllm_peer.run_peer(
                runner,
                results,
                pairs,
                prompts,
                [first.decode],
                drafters,
                engine,
                progress=progress,
                should_stop=should_stop,
                checked=vllm_checks.found(engine) if checked else None,
                off_device=off_device,
            )
            results = results + rows
            done = status_html(
                f"Comparison done: {len(pairs)} pair(s) × {len(drafters)} drafter(s), and "
                f"{len({r.method for r in rows})} vLLM engine row(s) from {engine.where}.",
                "ok",
            )
        except Exception as exc:  # ours ran: show them, and say what vLLM said (Stop: as news, not an error)
            done = error_status(
                (Ended if isinstance(exc, Ended) else PlaygroundError)(f"Ours done; no vLLM row: {exc}")
            )
    grid = bench.grid_frame(results)
    return (
        done,
        compare_figure(grid),
        positions_figure(vllm_report.positions_frame(results)),
        shown(grid),
        grid_download(grid, state, "comparison.csv"),
    )


def build(runner: Runner, controls: Controls, state: gr.State, catalog: list[str]) -> None:
    """The tab's widgets and events (inside a gr.Tab)."""
    gr.Markdown(
        "Several pairs and drafters on the same prompt and settings (precisions, k, policy, temperature, "
        "max new tokens, seed on the left; the custom model ids are not used), each against its own target "
        f"alone (at most {bench.MAX_CELLS} runs in all), and a vLLM engine beside them if you like."
    )
    pairs = checked_by_us(gr.CheckboxGroup(catalog, value=[controls.pair.value], label="Pairs", elem_id="cmp-pairs"))
    drafters = checked_by_us(
        gr.CheckboxGroup(
            [d.value for d in DRAFTERS], value=[d.value for d in DRAFTERS[:2]], label="Drafters", elem_id="cmp-drafters"
        )
    )
    by_url = vllm_peer.url_allowed()  # PLAYGROUND_VLLM_URLS empty: only vLLM started here is offered
    with gr.Accordion("vLLM engine row", open=False, elem_id="cmp-vllm-box"):
        gr.Markdown(VLLM_NOTE, elem_id="cmp-vllm-note")
        sources = [s for s in vllm_peer.VLLM_SOURCES if by_url or s != vllm_peer.VLLM_URL]
        source = checked_by_us(gr.Radio(sources, value=vllm_peer.NO_VLLM, label="vLLM engine", elem_id="cmp-vllm"))
        with gr.Row(visible=by_url, elem_id="cmp-vllm-server"):
            url = gr.Textbox(
                label="vLLM server URL (one this app's operator allows)",
                placeholder="http://host:8000",
                elem_id="cmp-vllm-url",
            )
            model = gr.Textbox(label="Served model name (when it serves several)", elem_id="cmp-vllm-model")
            target_url = gr.Textbox(
                label="Its target alone: a server of the same model without speculation (optional)",
                placeholder="http://host:8001",
                elem_id="cmp-vllm-target-url",
            )
            key = gr.Textbox(
                label="API key of these servers (optional; sent to them only, never shown)",
                type="password",
                elem_id="cmp-vllm-key",
            )
    with gr.Row():
        run_btn = gr.Button("Compare", variant="primary", elem_id="cmp-run")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="cmp-stop")
    status = gr.HTML("", elem_id="cmp-status")
    plot = gr.Plot(compare_figure(pd.DataFrame({"method": []})), show_label=False, elem_id="chart-compare")
    positions = gr.Plot(
        positions_figure(vllm_report.positions_frame([])), show_label=False, elem_id="chart-compare-positions"
    )
    table = gr.Dataframe(elem_id="cmp-table", interactive=False)
    csv = gr.DownloadButton("Comparison as CSV", interactive=False, elem_id="cmp-csv")

    def on_compare(progress: Any = gr.Progress(), request: gr.Request = None, *values: Any) -> tuple:
        chosen_pairs, chosen_drafters, *shared, vllm_source, vllm_url, vllm_model, vllm_target, vllm_key, session = (
            values
        )
        listener = jobs.Listener(request, state=session, tab="compare")  # Stop, or a client that left: the next round
        return run_compare(
            jobs.Watched(runner, listener),
            session,
            chosen_pairs,
            chosen_drafters,
            Controls.of(*shared),
            (vllm_source, vllm_url, vllm_model, vllm_target, vllm_key),
            gradio_progress(progress, listener.check),
            should_stop=lambda: listener.stopped or listener.gone,
            checked=True,  # by the validator, in its own pool, before the job joined the device queue
            off_device=listener.leave_device,  # a server's rows wait on the network only: the device goes on
        )  # ends vLLM's engine too

    inputs = [pairs, drafters] + controls.as_inputs() + [source, url, model, target_url, key, state]
    outputs = [status, plot, positions, table, csv]
    running = run_btn.click(
        gpu(on_compare),
        inputs=inputs,
        outputs=outputs,
        api_name="compare",
        validator=vllm_checks.admission(inputs, controls.prompt, [source, url, model, target_url, key], url),
        concurrency_id=DECODING,
        show_progress_on=[status],
    )  # the status shows "queue: n/m" while it waits
    jobs.wire_stop(stop_btn, "compare", running, state, status, len(outputs), api_name="compare_stop")
