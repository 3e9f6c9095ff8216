"""The Export tab: the shared settings as a Hugging Face generate(...) call, a vLLM script with its
speculative_config, and vLLM's server command lines (one GPU, tensor and pipeline parallel)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from playground import decoding, models
from playground.decoding.early_exit import exit_layer_for
from playground.core.errors import PlaygroundError
from playground.run.runner import Runner
from playground.run.spec import RunSpec
from playground.ui import links
from playground.ui.common import Controls, error_status, read_spec, status_html
from playground.views.export_code import hf_generate_code, vllm_code, vllm_serve_command


def exit_layer_from_config(spec: RunSpec) -> int:
    """The default early-exit layer (a quarter of the target's layers) from the target's config.json: Export runs
    outside the device queue, so it never loads a model (that would share the machine with a run being timed)."""
    config = models.model_config(models.resolve(spec.pair.target)) or {}
    config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    layers = next((config[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if k in config), None)
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise PlaygroundError(
            "The target's layer count is not known before it is loaded once (run it on the Run tab "
            "first), or set the early-exit layer L on the left."
        )
    return exit_layer_for(layers)


def show_export(runner: Runner, controls: Controls) -> tuple[str, Any, Any, Any]:
    """(status, transformers code, vLLM script, vLLM server commands) for the current pair, drafter, precisions,
    k and sampling."""
    try:
        spec = read_spec(controls)
        layer = None
        if decoding.strategy(spec.drafter.kind).model == "target":  # early exit; its default: the target's layers / 4
            layer = spec.drafter.options.exit_layer or exit_layer_from_config(spec)
        hf, vllm, serve = hf_generate_code(spec, layer), vllm_code(spec, layer), vllm_serve_command(spec)
    except Exception as exc:
        return error_status(exc), gr.skip(), gr.skip(), gr.skip()
    return status_html("The code for this pair, drafter and k:", "ok"), hf, vllm, serve


def settings_link(controls: Controls, compare: bool) -> tuple[str, str]:
    """(the page's link for these settings, as a query string the page completes; a note on what it leaves out)."""
    try:
        query, note = links.settings_link(controls, bool(compare))
    except Exception as exc:
        return gr.skip(), error_status(exc)
    return query, status_html(
        note
        or "Open this link to get these settings (pair, drafter, precisions, k, policy, "
        "tree, sampling, seed and the prompt).",
        "info" if note else "ok",
    )


# The callback gives "?pair=...": the page adds its own address (behind a proxy only the browser knows it).
FULL_LINK_JS = "(q) => (q && q.startsWith('?')) ? window.location.origin + window.location.pathname + q : q"


def build(runner: Runner, controls: Controls, compare: gr.Checkbox) -> None:
    """The tab's widgets and events (inside a gr.Tab)."""
    gr.Markdown(
        "The same choice of pair, drafter, precisions and k as a link to this page, a Hugging Face "
        "`generate(...)` call, a vLLM script with its `speculative_config`, and vLLM's server on one GPU, on "
        "several (tensor parallel) and on several nodes (pipeline parallel), to share or take to production; "
        "the Compare pairs tab reads such a server by its URL."
    )
    with gr.Row(equal_height=False):
        link_btn = gr.Button("Link to these settings", elem_id="export-link-run", scale=0, min_width=220)
        link = gr.Textbox(label="Link", elem_id="export-link", interactive=False, buttons=["copy"], scale=4)
    link_status = gr.HTML("", elem_id="export-link-status")
    link_btn.click(
        lambda *values: settings_link(Controls.of(*values[:-1]), values[-1]),
        inputs=controls.as_inputs() + [compare],
        outputs=[link, link_status],
        concurrency_limit=None,
        api_name="settings_link",
    ).then(None, inputs=link, outputs=link, js=FULL_LINK_JS, api_visibility="private")
    run_btn = gr.Button("Show the code", variant="primary", elem_id="export-run")
    status = gr.HTML("", elem_id="export-status")
    hf = gr.Code(language="python", label="transformers", elem_id="export-hf")
    vllm = gr.Code(language="python", label="vLLM", elem_id="export-vllm")
    serve = gr.Code(
        language="shell", label="vLLM server: one GPU, tensor and pipeline parallel", elem_id="export-serve"
    )

    def on_export(*values: Any) -> tuple[str, Any, Any, Any]:
        return show_export(runner, Controls.of(*values))  # `inputs` below: the shared controls

    run_btn.click(
        on_export,
        inputs=controls.as_inputs(),
        outputs=[status, hf, vllm, serve],
        api_name="export",
        concurrency_limit=None,
    )
