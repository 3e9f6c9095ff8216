"""The Export tab's callback: code for the current choice, checked settings."""

from __future__ import annotations

import ast

import pytest

from playground.ui.export_tab import show_export
from ui_support import controls


@pytest.mark.parametrize("drafter", ["draft model", "prompt lookup", "early exit"])
def test_export_for_the_current_choice(tiny_catalog, tiny_models, runner, drafter):
    status, hf, vllm, serve = show_export(runner, controls(drafter=drafter, temperature=0.7, k=5))
    assert "status-ok" in status
    ast.parse(hf)
    ast.parse(vllm)
    assert ("--tensor-parallel-size" in serve) == (drafter != "early exit")
    assert "'path/to/your/target-model'" in hf  # the tiny pair's folders are the server's: a placeholder instead
    assert all(str(tiny_models["target"].parent) not in code for code in (hf, vllm, serve))
    keyword = {
        "draft model": "assistant_model=assistant",
        "prompt lookup": "prompt_lookup_num_tokens=5",
        "early exit": "assistant_early_exit=1",
    }[drafter]  # the tiny target: 2 layers, a quarter is 1
    assert keyword in hf and "do_sample=True" in hf


def test_export_names_the_bad_setting(tiny_catalog, runner):
    assert "k (draft length)" in show_export(runner, controls(k=17))[0]
    assert "prompt is empty" in show_export(runner, controls(prompt=""))[0]


def test_export_carries_the_precisions(tiny_catalog, runner):
    _, hf, _, _ = show_export(runner, controls(target_precision="bf16", draft_precision="int8"))
    assert "torch.bfloat16" in hf and "quantize_dynamic" in hf
