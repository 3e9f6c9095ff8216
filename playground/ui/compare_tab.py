"""The Compare pairs tab: several catalog pairs and drafters on the same prompt and settings, each
against its own target alone (bench.run_grid; the run cap counts the whole request)."""
from __future__ import annotations

from typing import Any

import gradio as gr
import pandas as pd

from playground import bench
from playground.errors import PlaygroundError
from playground.progress import Progress, quiet
from playground.runner import Runner
from playground.spec import DRAFTERS, parse_names
from playground.ui import jobs
from playground.ui.common import (DECODING, Controls, checked_by_us, error_status, gpu, gradio_progress, read_spec,
                                  status_html)
from playground.ui.state import SessionState
from playground.ui.sweep_tab import grid_download, shown
from playground.views.grid import compare_figure


def run_compare(runner: Runner, state: SessionState, pair_names: list[str], drafter_names: list[str],
                controls: Controls, progress: Progress = quiet) -> tuple:
    """(status, bars, table, CSV download) of every chosen pair x drafter with the shared settings (the
    custom model ids are not used here: each pair runs its own models, "draft model" through the drafter its
    tokenizers need: models.own_drafter). The runner may be a jobs.Watched one:
    the comparison then ends at the next round once nobody listens."""
    fail = lambda exc: (error_status(exc),) + (gr.skip(),) * 3
    try:
        pair_names, drafter_names = parse_names(pair_names, "Pairs"), parse_names(drafter_names, "Drafters")
        if not pair_names or not drafter_names:
            raise PlaygroundError("Pick at least one pair and one drafter to compare.")
        specs = [read_spec(controls.but(pair=p, drafter=d, draft_id="", target_id=""))
                 for p in pair_names for d in drafter_names]  # validates every choice
        pairs = list(dict.fromkeys(s.pair for s in specs))
        drafters = list(dict.fromkeys(s.drafter for s in specs))
        first = specs[0]
        results = bench.run_grid(runner, pairs, {"prompt": first.prompt}, [first.decode], drafters,
                                 max_cells=bench.MAX_CELLS, progress=progress)  # the cap counts the whole request
        grid = bench.grid_frame(results)
    except Exception as exc:
        return fail(exc)
    return (status_html(f"Comparison done: {len(pairs)} pair(s) × {len(drafters)} drafter(s).", "ok"),
            compare_figure(grid), shown(grid), grid_download(grid, state, "comparison.csv"))


def build(runner: Runner, controls: Controls, state: gr.State, catalog: list[str]) -> None:
    """The tab's widgets and events (inside a gr.Tab)."""
    gr.Markdown("Several pairs and drafters on the same prompt and settings (precisions, k, policy, temperature, "
                "max new tokens, seed on the left; the custom model ids are not used), each against its own target "
                f"alone (at most {bench.MAX_CELLS} runs in all).")
    pairs = checked_by_us(gr.CheckboxGroup(catalog, value=[controls.pair.value], label="Pairs", elem_id="cmp-pairs"))
    drafters = checked_by_us(gr.CheckboxGroup([d.value for d in DRAFTERS], value=[d.value for d in DRAFTERS[:2]],
                                              label="Drafters", elem_id="cmp-drafters"))
    with gr.Row():
        run_btn = gr.Button("Compare", variant="primary", elem_id="cmp-run")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="cmp-stop")
    status = gr.HTML("", elem_id="cmp-status")
    plot = gr.Plot(compare_figure(pd.DataFrame({"method": []})), show_label=False, elem_id="chart-compare")
    table = gr.Dataframe(elem_id="cmp-table", interactive=False)
    csv = gr.DownloadButton("Comparison as CSV", interactive=False, elem_id="cmp-csv")

    def on_compare(progress: Any = gr.Progress(), request: gr.Request = None, *values: Any) -> tuple:
        chosen_pairs, chosen_drafters, *shared, session = values  # the order of `inputs` below
        listener = jobs.Listener(request, state=session, tab="compare")  # Stop, or a client that left: the next round
        return run_compare(jobs.Watched(runner, listener), session, chosen_pairs, chosen_drafters, Controls(*shared),
                           gradio_progress(progress, listener.check))

    inputs = [pairs, drafters] + controls.as_inputs() + [state]
    outputs = [status, plot, table, csv]
    running = run_btn.click(gpu(on_compare), inputs=inputs, outputs=outputs, api_name="compare",
                            validator=jobs.admission(inputs, shown_on=controls.prompt), concurrency_id=DECODING,
                            show_progress_on=[status])  # the status shows "queue: n/m" while it waits
    jobs.wire_stop(stop_btn, "compare", running, state, status, len(outputs), api_name="compare_stop")
