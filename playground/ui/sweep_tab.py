"""The Sweep tab: a k x temperature grid with the shared pair, drafter and settings (bench.run_grid),
as three heatmaps (measured speedup, alpha, Leviathan's speedup for each cell's alpha and c) and a table."""

from __future__ import annotations

import math
from typing import Any

import gradio as gr
import pandas as pd

from playground import bench
from playground.trace.results import columns
from playground.core.errors import PlaygroundError
from playground.core.errors import shown as quoted
from playground.core.progress import Progress, quiet
from playground.run.runner import Runner
from playground.core.config import KPolicy, K_MAX, K_MIN
from playground.core.inputs import parse_list
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
from playground.views.grid import BASELINE, sweep_figures

THIS_PROMPT, BUILT_IN = "this prompt", "the built-in set (6 categories)"
# the table shown; the CSV has every column of bench.grid_frame
TABLE_COLUMNS = columns("tab")


def shown(grid: pd.DataFrame) -> pd.DataFrame:
    """The grid as the tables show it: our engine's rows and vLLM's (the Compare tab's engine row), the main
    columns, rounded."""
    ours = grid[grid["engine"].isin(["ours", "vllm"])] if "engine" in grid else grid
    return ours[[c for c in TABLE_COLUMNS if c in ours]].round(3)


def grid_download(grid: pd.DataFrame, state: SessionState, name: str) -> Any:
    (path,) = state.downloads.write({name: grid.to_csv(index=False)})
    return gr.update(value=path, interactive=True)


def run_sweep(
    runner: Runner,
    state: SessionState,
    controls: Controls,
    ks_text: str,
    temps_text: str,
    prompt_set: str,
    progress: Progress = quiet,
) -> tuple:
    """(status, speedup heatmap, alpha heatmap, theory heatmap, table, CSV download) of a k x temperature grid
    on this prompt or the built-in set; at most bench.MAX_CELLS runs, counted before anything runs.
    The runner may be a jobs.Watched one: the sweep then ends at the next round once nobody listens."""
    fail = lambda exc: (error_status(exc),) + (gr.skip(),) * 5
    try:
        ks = parse_list(ks_text, "k values", int, lambda v: K_MIN <= v <= K_MAX, f"whole numbers {K_MIN}..{K_MAX}")
        temps = parse_list(temps_text, "temperatures", float, lambda v: math.isfinite(v) and 0 <= v <= 2, "0..2")
        if prompt_set not in (THIS_PROMPT, BUILT_IN):
            raise PlaygroundError(f"Unknown prompt set {quoted(prompt_set)}; choose {THIS_PROMPT!r} or {BUILT_IN!r}.")
        builtin = prompt_set == BUILT_IN
        # the grid's first cell, to check every shared setting once (the prompt box is not used with the built-in set)
        first = controls.but(
            k=ks[0],
            policy=KPolicy.FIXED.label,
            temperature=temps[0],
            prompt=next(iter(bench.PROMPTS.values())) if builtin else controls.prompt,
        )
        spec = read_spec(first)
        prompts = dict(bench.PROMPTS) if builtin else {THIS_PROMPT: spec.prompt}
        tree = spec.decode.tree  # a token tree on the left: one more column, next to the k values
        decodes = bench.decode_grid(
            [(k, KPolicy.FIXED) for k in ks],
            temps,
            spec.decode.max_new_tokens,
            spec.decode.seed,
            top_p=spec.decode.top_p,
            trees=[tree] if tree else [],
        )
        grid = bench.grid_frame(
            bench.run_grid(
                runner, [spec.pair], prompts, decodes, [spec.drafter], max_cells=bench.MAX_CELLS, progress=progress
            )
        )
    except Exception as exc:
        return fail(exc)
    cells = int(((grid["engine"] == "ours") & (grid["method"] != BASELINE)).sum())
    return (
        status_html(f"Sweep done: {cells} runs, {len(prompts)} prompt(s).", "ok"),
        *sweep_figures(grid),
        shown(grid),
        grid_download(grid, state, "sweep.csv"),
    )


def build(runner: Runner, controls: Controls, state: gr.State) -> None:
    """The tab's widgets and events (inside a gr.Tab)."""
    gr.Markdown(
        "A grid of k × temperature with the pair, drafter and settings on the left: measured speedup over "
        "the target alone and α, beside Leviathan's speedup for each cell's measured α and c "
        f"(at most {bench.MAX_CELLS} runs)."
    )
    with gr.Row():
        ks = gr.Textbox("1 2 4 8", label="k values", elem_id="sweep-ks")
        temps = gr.Textbox("0 0.7 1.0", label="Temperatures", elem_id="sweep-temps")
        prompt_set = checked_by_us(
            gr.Radio([THIS_PROMPT, BUILT_IN], value=THIS_PROMPT, label="Prompts", elem_id="sweep-set")
        )
    with gr.Row():
        run_btn = gr.Button("Run sweep", variant="primary", elem_id="sweep-run")
        stop_btn = gr.Button("Stop", variant="stop", elem_id="sweep-stop")
    status = gr.HTML("", elem_id="sweep-status")
    empty = sweep_figures(pd.DataFrame({"method": []}))
    with gr.Row():
        speedup = gr.Plot(empty[0], show_label=False, elem_id="chart-sweep-speedup")
        alpha = gr.Plot(empty[1], show_label=False, elem_id="chart-sweep-alpha")
        theory = gr.Plot(empty[2], show_label=False, elem_id="chart-sweep-theory")
    table = gr.Dataframe(elem_id="sweep-table", interactive=False)
    csv = gr.DownloadButton("Grid as CSV", interactive=False, elem_id="sweep-csv")

    def on_sweep(progress: Any = gr.Progress(), request: gr.Request = None, *values: Any) -> tuple:
        *shared, ks_text, temps_text, which, session = values  # the order of `inputs` below
        listener = jobs.Listener(request, state=session, tab="sweep")  # Stop, or a client that left: the next round
        return run_sweep(
            jobs.Watched(runner, listener),
            session,
            Controls.of(*shared),
            ks_text,
            temps_text,
            which,
            gradio_progress(progress, listener.check),
        )

    inputs = controls.as_inputs() + [ks, temps, prompt_set, state]
    outputs = [status, speedup, alpha, theory, table, csv]
    running = run_btn.click(
        gpu(on_sweep),
        inputs=inputs,
        outputs=outputs,
        api_name="sweep",
        validator=jobs.admission(inputs, shown_on=controls.prompt),
        concurrency_id=DECODING,
        show_progress_on=[status],
    )  # the status shows "queue: n/m" while it waits
    jobs.wire_stop(stop_btn, "sweep", running, state, status, len(outputs), api_name="sweep_stop")
