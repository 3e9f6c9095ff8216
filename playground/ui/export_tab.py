"""The Export tab: the shared settings as a Hugging Face generate(...) call and a vLLM speculative_config."""
from __future__ import annotations

from typing import Any

import gradio as gr

from playground import decoding, models
from playground.decoding.early_exit import exit_layer_for
from playground.errors import PlaygroundError
from playground.runner import Runner
from playground.spec import RunSpec
from playground.ui.common import Controls, error_status, read_spec, status_html
from playground.views.export_code import hf_generate_code, vllm_code


def exit_layer_from_config(spec: RunSpec) -> int:
    """The default early-exit layer (a quarter of the target's layers) from the target's config.json: Export runs
    outside the device queue, so it never loads a model (that would share the machine with a run being timed)."""
    config = models.model_config(models.resolve(spec.pair.target)) or {}
    config = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    layers = next((config[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if k in config), None)
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise PlaygroundError("The target's layer count is not known before it is loaded once (run it on the Run tab "
                              "first), or set the early-exit layer L on the left.")
    return exit_layer_for(layers)


def show_export(runner: Runner, controls: Controls) -> tuple[str, Any, Any]:
    """(status, transformers code, vLLM code) for the current pair, drafter, precisions, k and sampling."""
    try:
        spec = read_spec(controls)
        layer = spec.drafter.exit_layer
        if decoding.strategy(spec.drafter.kind).model == "target" and layer is None:  # the default: the target's layers / 4
            layer = exit_layer_from_config(spec)
        hf, vllm = hf_generate_code(spec, layer), vllm_code(spec, layer)
    except Exception as exc:
        return error_status(exc), gr.skip(), gr.skip()
    return status_html("The code for this pair, drafter and k:", "ok"), hf, vllm


def build(runner: Runner, controls: Controls) -> None:
    """The tab's widgets and events (inside a gr.Tab)."""
    gr.Markdown("The same choice of pair, drafter, precisions and k as a Hugging Face `generate(...)` call and a "
                "vLLM `speculative_config`, to take to production.")
    run_btn = gr.Button("Show the code", variant="primary", elem_id="export-run")
    status = gr.HTML("", elem_id="export-status")
    hf = gr.Code(language="python", label="transformers", elem_id="export-hf")
    vllm = gr.Code(language="python", label="vLLM", elem_id="export-vllm")

    def on_export(*values: Any) -> tuple[str, Any, Any]:
        return show_export(runner, Controls(*values))  # `inputs` below: the shared controls

    run_btn.click(on_export, inputs=controls.as_inputs(), outputs=[status, hf, vllm], api_name="export",
                  concurrency_limit=None)
