"""The exported HF / vLLM code: it parses, carries the chosen settings, embeds user text only
as string literals, and rejects bad numbers. No network, no models."""
import ast
import json
import math

import pytest

from playground import export, session
from playground.errors import PlaygroundError

TARGET, DRAFT = "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"
HOSTILE = 'x"); import os; os.system("rm -rf /") #\n'
ALLOWED_IMPORTS = {"torch", "transformers", "vllm"}


def hf(drafter=export.DRAFT_MODEL, k=4, adaptive=False, temperature=0.0, top_p=1.0, max_new_tokens=64,
       exit_layer=6, prompt="Hello", target=TARGET, draft=DRAFT):
    return export.hf_generate_code(target, draft, drafter, k, adaptive, temperature, top_p, max_new_tokens,
                                   exit_layer=exit_layer, prompt=prompt)


def vllm(drafter=export.DRAFT_MODEL, k=4, temperature=0.0, top_p=1.0, max_new_tokens=64, exit_layer=6,
         prompt="Hello", target=TARGET, draft=DRAFT):
    return export.vllm_code(target, draft, drafter, k, temperature, top_p, max_new_tokens,
                            exit_layer=exit_layer, prompt=prompt)


def generate_call(code: str) -> ast.Call:
    calls = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr == "generate"]
    assert len(calls) == 1
    return calls[0]


def kwargs(call: ast.Call) -> dict:
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords
            if kw.arg is not None and isinstance(kw.value, ast.Constant)}


def imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    return names


def constants(tree: ast.AST) -> list:
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]


def test_drafter_names_match_the_session():
    assert (export.DRAFT_MODEL, export.PROMPT_LOOKUP, export.EARLY_EXIT) == (
        session.DRAFT_MODEL, session.PROMPT_LOOKUP, session.EARLY_EXIT)


@pytest.mark.parametrize("drafter", export.DRAFTERS)
@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("adaptive", [False, True])
def test_hf_snippet(drafter, temperature, adaptive):
    code = hf(drafter, k=4, adaptive=adaptive, temperature=temperature, top_p=0.9, max_new_tokens=50, exit_layer=6)
    tree = ast.parse(code)
    assert imported(tree) <= ALLOWED_IMPORTS
    assert "from transformers import AutoModelForCausalLM, AutoTokenizer" in code
    assert f'AutoModelForCausalLM.from_pretrained({TARGET!r}, dtype="auto")' in code
    assert "apply_chat_template(" in code and "return_dict=True" in code
    assert "print(tok.decode(" in code
    kw = kwargs(generate_call(code))
    assert kw["max_new_tokens"] == 50
    schedule = "heuristic" if adaptive else "constant"
    if drafter == export.DRAFT_MODEL:
        assert "assistant_model=assistant" in code
        assert f'AutoModelForCausalLM.from_pretrained({DRAFT!r}, dtype="auto")' in code
        assert "assistant.generation_config.num_assistant_tokens = 4" in code
        assert f"assistant.generation_config.num_assistant_tokens_schedule = {schedule!r}" in code
        assert "prompt_lookup_num_tokens" not in code and "assistant_early_exit" not in code
    elif drafter == export.PROMPT_LOOKUP:
        assert kw["prompt_lookup_num_tokens"] == 4
        assert "prompt_lookup_num_tokens=4" in code
        assert "assistant" not in code and DRAFT not in code
    else:
        assert kw["assistant_early_exit"] == 6
        assert "assistant_early_exit=6" in code
        assert "model.generation_config.num_assistant_tokens = 4" in code
        assert "LayerSkip" in code
        assert "assistant_model" not in code and DRAFT not in code
    if temperature == 0:
        assert kw["do_sample"] is False and "temperature" not in kw and "top_p" not in kw
        assert "do_sample=False" in code
    else:
        assert kw["do_sample"] is True and kw["temperature"] == 0.8 and kw["top_p"] == 0.9


@pytest.mark.parametrize("drafter", export.DRAFTERS)
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_vllm_snippet(drafter, temperature):
    code = vllm(drafter, k=5, temperature=temperature, top_p=0.9, max_new_tokens=40)
    tree = ast.parse(code)
    if drafter == export.EARLY_EXIT:
        assert tree.body == []  # comments only
        assert "vLLM has no" in code and "assistant_early_exit" in code
        return
    assert imported(tree) == {"vllm"} and "from vllm import LLM, SamplingParams" in code
    calls = {n.func.id: n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    llm = {kw.arg: ast.literal_eval(kw.value) for kw in calls["LLM"].keywords}
    assert llm == {"model": TARGET, "speculative_config": export.vllm_config(TARGET, DRAFT, drafter, 5)}
    params = {kw.arg: ast.literal_eval(kw.value) for kw in calls["SamplingParams"].keywords}
    assert params == {"temperature": temperature, "top_p": 0.9, "max_tokens": 40}
    assert "llm.chat(" in code and "print(out[0].outputs[0].text)" in code


def test_vllm_config_values_round_trip_json():
    draft = export.vllm_config(TARGET, DRAFT, export.DRAFT_MODEL, 4)
    assert draft == {"model": DRAFT, "num_speculative_tokens": 4}
    ngram = export.vllm_config(TARGET, None, export.PROMPT_LOOKUP, 7)
    assert ngram == {"method": "ngram", "num_speculative_tokens": 7, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    for config in (draft, ngram):
        assert json.loads(json.dumps(config)) == config
    assert export.vllm_config(TARGET, DRAFT, export.EARLY_EXIT, 4, exit_layer=6) is None
    assert export.vllm_config(TARGET, DRAFT, export.EARLY_EXIT, 4) is None  # no layer needed to say "none"


@pytest.mark.parametrize("where", ["prompt", "target", "draft"])
def test_hostile_text_stays_a_string(where):
    args = {where: HOSTILE}
    for code in (hf(export.DRAFT_MODEL, temperature=0.8, **args), vllm(export.DRAFT_MODEL, **args)):
        tree = ast.parse(code)
        assert imported(tree) <= ALLOWED_IMPORTS and "os" not in imported(tree)
        assert HOSTILE in constants(tree)
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert "os" not in names


def test_hostile_prompt_is_the_prompt_constant():
    tree = ast.parse(hf(export.PROMPT_LOOKUP, prompt=HOSTILE))
    assigns = {n.targets[0].id: n.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)}
    assert isinstance(assigns["prompt"], ast.Constant) and assigns["prompt"].value == HOSTILE


@pytest.mark.parametrize("field, change", [
    ("k", {"k": 0}), ("k", {"k": 17}), ("k", {"k": 2.5}), ("k", {"k": True}), ("k", {"k": "4"}),
    ("temperature", {"temperature": -1}), ("temperature", {"temperature": math.nan}),
    ("temperature", {"temperature": math.inf}), ("temperature", {"temperature": 2.5}),
    ("top_p", {"top_p": 0}), ("top_p", {"top_p": 1.5}), ("top_p", {"top_p": math.nan}),
    ("max_new_tokens", {"max_new_tokens": 0}), ("max_new_tokens", {"max_new_tokens": 1.5}),
])
@pytest.mark.parametrize("make", [hf, vllm])
def test_bad_numbers(make, field, change):
    with pytest.raises(PlaygroundError, match=field):
        make(export.PROMPT_LOOKUP, **change)


def test_integral_floats_from_sliders_are_accepted():
    assert "prompt_lookup_num_tokens=4," in hf(export.PROMPT_LOOKUP, k=4.0, max_new_tokens=32.0)
    assert "max_new_tokens=32," in hf(export.PROMPT_LOOKUP, k=4.0, max_new_tokens=32.0)


def test_bad_drafter_and_missing_parts():
    with pytest.raises(PlaygroundError, match="draft model, prompt lookup, early exit"):
        hf("medusa")
    with pytest.raises(PlaygroundError, match="draft model, prompt lookup, early exit"):
        export.vllm_config(TARGET, DRAFT, "medusa", 4)
    with pytest.raises(PlaygroundError, match="draft_id"):
        hf(export.DRAFT_MODEL, draft=None)
    with pytest.raises(PlaygroundError, match="exit_layer"):
        hf(export.EARLY_EXIT, exit_layer=None)
    with pytest.raises(PlaygroundError, match="exit_layer"):
        hf(export.EARLY_EXIT, exit_layer=0)


def test_hub_id_maps_packs():
    assert export.hub_id("pack:qwen2.5-coder-0.5b-instruct") == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    assert export.hub_id("pack:qwen2.5-coder-1.5b-instruct") == "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    assert export.hub_id("pack:something-else") == "pack:something-else"
    assert export.hub_id("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert export.hub_id("/models/my-llama") == "/models/my-llama"


def test_pack_specs_export_as_hub_ids():
    code = hf(export.DRAFT_MODEL, target="pack:qwen2.5-coder-1.5b-instruct", draft="pack:qwen2.5-coder-0.5b-instruct")
    assert "'Qwen/Qwen2.5-Coder-1.5B-Instruct'" in code and "'Qwen/Qwen2.5-Coder-0.5B-Instruct'" in code
    assert "pack:" not in code
    assert export.vllm_config("pack:qwen2.5-coder-1.5b-instruct", "pack:qwen2.5-coder-0.5b-instruct",
                              export.DRAFT_MODEL, 3)["model"] == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    assert "model='Qwen/Qwen2.5-Coder-1.5B-Instruct'" in vllm(target="pack:qwen2.5-coder-1.5b-instruct")
