"""Export the playground's settings as code to take to production: a Hugging Face
`model.generate` snippet and a vLLM `speculative_config`.

Every user-controlled string (model ids, the prompt) goes into the code through repr(),
so quotes or newlines in it stay inside a string literal. Numbers are validated first.
"""
from __future__ import annotations

import math

from playground.engine import K_MAX, K_MIN
from playground.errors import PlaygroundError
from playground.session import DRAFT_MODEL, DRAFTERS, EARLY_EXIT, PROMPT_LOOKUP

# The offline packs are GGUF re-uploads of these Hub models.
PACK_HUB_IDS = {
    "pack:qwen2.5-coder-0.5b-instruct": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    "pack:qwen2.5-coder-1.5b-instruct": "Qwen/Qwen2.5-Coder-1.5B-Instruct",
}


def hub_id(spec: str) -> str:
    """The Hub id for a known "pack:NAME" spec; any other spec (Hub id, folder, unknown pack) unchanged."""
    return PACK_HUB_IDS.get(spec, spec)


def _whole(name: str, value: object, low: int, high: int | None = None) -> int:
    ok = (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())
    if not ok or value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f">= {low}"
        raise PlaygroundError(f"{name} must be a whole number {bound}, got {value!r}.")
    return int(value)


def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PlaygroundError(f"{name} must be a finite number, got {value!r}.")
    return float(value)


def _check(target_id: str, draft_id: str | None, drafter: str, k: object,
           exit_layer: object) -> tuple[str, str | None, int, int | None]:
    """Validate what both exports share; return (target id, draft id, k, exit layer), packs mapped to Hub ids.
    exit_layer is checked (a whole number >= 1) only for early exit and only when given."""
    if drafter not in DRAFTERS:
        raise PlaygroundError(f"Unknown drafter {drafter!r}; choose one of: {', '.join(DRAFTERS)}.")
    if not isinstance(target_id, str) or not target_id.strip():
        raise PlaygroundError("target_id must be a model id or folder, got nothing.")
    if drafter == DRAFT_MODEL and (not isinstance(draft_id, str) or not draft_id.strip()):
        raise PlaygroundError("The draft model drafter needs draft_id (a model id or folder).")
    k = _whole("k", k, K_MIN, K_MAX)
    layer = _whole("exit_layer", exit_layer, 1) if drafter == EARLY_EXIT and exit_layer is not None else None
    return hub_id(target_id), hub_id(draft_id) if drafter == DRAFT_MODEL else None, k, layer


def _sampling(temperature: object, top_p: object, max_new_tokens: object) -> tuple[float, float, int]:
    temperature, top_p = _real("temperature", temperature), _real("top_p", top_p)
    if not 0 <= temperature <= 2:
        raise PlaygroundError(f"temperature must be from 0 to 2 (0 = greedy), got {temperature!r}.")
    if not 0 < top_p <= 1:
        raise PlaygroundError(f"top_p must be in (0, 1], got {top_p!r}.")
    return temperature, top_p, _whole("max_new_tokens", max_new_tokens, 1)


def hf_generate_code(target_id: str, draft_id: str | None, drafter: str, k: int, adaptive: bool,
                     temperature: float, top_p: float, max_new_tokens: int,
                     exit_layer: int | None = None, prompt: str = "Hello") -> str:
    """A runnable transformers snippet: speculative (assisted) generation with these settings."""
    target_id, draft_id, k, layer = _check(target_id, draft_id, drafter, k, exit_layer)
    if drafter == EARLY_EXIT and layer is None:
        raise PlaygroundError("The early exit drafter needs exit_layer (how many of the target's layers draft).")
    temperature, top_p, max_new_tokens = _sampling(temperature, top_p, max_new_tokens)
    if not isinstance(prompt, str):
        raise PlaygroundError(f"prompt must be text, got {type(prompt).__name__}.")
    schedule = "heuristic" if adaptive else "constant"
    lines = [
        "import torch",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        'device = "cuda" if torch.cuda.is_available() else "cpu"',
        f"tok = AutoTokenizer.from_pretrained({target_id!r})",
        f'model = AutoModelForCausalLM.from_pretrained({target_id!r}, dtype="auto").to(device)',
    ]
    if drafter == DRAFT_MODEL:
        lines += [
            f'assistant = AutoModelForCausalLM.from_pretrained({draft_id!r}, dtype="auto").to(device)',
            f"assistant.generation_config.num_assistant_tokens = {k}",
            f"assistant.generation_config.num_assistant_tokens_schedule = {schedule!r}",
        ]
        speculative = "assistant_model=assistant"
    elif drafter == PROMPT_LOOKUP:
        speculative = f"prompt_lookup_num_tokens={k}"
    else:
        lines += [
            "# Early exit works best with models trained for it (LayerSkip, e.g. facebook/layerskip-llama3.2-1B).",
            f"model.generation_config.num_assistant_tokens = {k}",
            f"model.generation_config.num_assistant_tokens_schedule = {schedule!r}",
        ]
        speculative = f"assistant_early_exit={layer}"
    sampling = "do_sample=False" if temperature == 0 else f"do_sample=True, temperature={temperature!r}, top_p={top_p!r}"
    lines += [
        "",
        f"prompt = {prompt!r}",
        "if tok.chat_template:",
        '    inputs = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,',
        '                                     return_tensors="pt", return_dict=True).to(device)',
        "else:",
        '    inputs = tok(prompt, return_tensors="pt").to(device)',
        f"out = model.generate(**inputs, {speculative}, max_new_tokens={max_new_tokens}, {sampling})",
        'print(tok.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))',
    ]
    return "\n".join(lines) + "\n"


def vllm_config(target_id: str, draft_id: str | None, drafter: str, k: int,
                exit_layer: int | None = None) -> dict | None:
    """The `speculative_config` for vLLM's `LLM(model=..., speculative_config=...)`.

    None for early exit: vLLM has no layer-skip self-speculation for ordinary models
    (use the draft model or prompt lookup drafter there, or HF's assistant_early_exit)."""
    _, draft_id, k, _ = _check(target_id, draft_id, drafter, k, exit_layer)
    if drafter == DRAFT_MODEL:
        return {"model": draft_id, "num_speculative_tokens": k}
    if drafter == PROMPT_LOOKUP:
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    return None


def vllm_code(target_id: str, draft_id: str | None, drafter: str, k: int, temperature: float, top_p: float,
              max_new_tokens: int, exit_layer: int | None = None, prompt: str = "Hello") -> str:
    """A runnable vLLM snippet; for early exit, a comment-only snippet saying vLLM has no equivalent."""
    config = vllm_config(target_id, draft_id, drafter, k, exit_layer)
    temperature, top_p, max_new_tokens = _sampling(temperature, top_p, max_new_tokens)
    if not isinstance(prompt, str):
        raise PlaygroundError(f"prompt must be text, got {type(prompt).__name__}.")
    if config is None:
        return ("# vLLM has no early-exit (layer-skip) self-speculation for ordinary models.\n"
                "# Use the draft model or prompt lookup drafter with vLLM, or HF's assistant_early_exit.\n")
    return "\n".join([
        "from vllm import LLM, SamplingParams",
        "",
        f"llm = LLM(model={hub_id(target_id)!r}, speculative_config={config!r})",
        f"params = SamplingParams(temperature={temperature!r}, top_p={top_p!r}, max_tokens={max_new_tokens})",
        f"prompt = {prompt!r}",
        'out = llm.chat([{"role": "user", "content": prompt}], params)',
        "print(out[0].outputs[0].text)",
    ]) + "\n"
