"""A run, as code to take to production: a Hugging Face `model.generate` snippet and a vLLM
`speculative_config`.

Input is the run's RunSpec, already validated (playground.spec), so nothing is range-checked here.
Every user-controlled string (model ids, the prompt) goes into the code through repr(), so quotes
or newlines in it stay inside a string literal; every number is an int or a float of the spec.
"""
from __future__ import annotations

from playground.errors import PlaygroundError
from playground.spec import DrafterKind, KPolicy, Precision, RunSpec

# The offline packs are GGUF re-uploads of these Hub models.
PACK_HUB_IDS = {
    "pack:qwen2.5-coder-0.5b-instruct": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    "pack:qwen2.5-coder-1.5b-instruct": "Qwen/Qwen2.5-Coder-1.5B-Instruct",
}
TORCH_DTYPES = {Precision.FP32: "torch.float32", Precision.BF16: "torch.bfloat16", Precision.FP16: "torch.float16"}
VLLM_DTYPES = {Precision.FP32: "float32", Precision.BF16: "bfloat16", Precision.FP16: "float16"}


def hub_id(model: str) -> str:
    """The Hub id for a known "pack:NAME" model; any other (Hub id, folder, unknown pack) unchanged."""
    return PACK_HUB_IDS.get(model, model)


def _layer(spec: RunSpec, exit_layer: int | None) -> int:
    layer = spec.drafter.exit_layer or exit_layer
    if layer is None:
        raise PlaygroundError("Exporting early exit needs the exit layer: pass the resolved layer "
                              "(a quarter of the target's layers by default).")
    return int(layer)


def _dtype(precision: Precision | None) -> str:
    """The from_pretrained dtype argument: the precision's torch dtype, or "auto" for the device default."""
    return TORCH_DTYPES[precision] if precision in TORCH_DTYPES else '"auto"'


def _draft_lines(spec: RunSpec, draft_id: str, schedule: str) -> list[str]:
    precision = spec.drafter.precision
    lines = []
    if precision is Precision.INT8:
        lines += [
            "# The run drafted in int8 (dynamic, per channel, a CPU precision); the target verifies every",
            "# token, so the output is still the target's.",
            f"assistant = AutoModelForCausalLM.from_pretrained({draft_id!r}, dtype=torch.float32).to(device)",
            "assistant.model = quantize_dynamic(assistant.model, {torch.nn.Linear: per_channel_dynamic_qconfig},",
            "                                   dtype=torch.qint8)",
        ]
    else:
        if precision is not None:
            lines.append(f"# The run drafted in {precision.value}.")
        lines.append(f"assistant = AutoModelForCausalLM.from_pretrained({draft_id!r}, dtype={_dtype(precision)}).to(device)")
    lines += [
        f"assistant.generation_config.num_assistant_tokens = {spec.decode.k}",
        f"assistant.generation_config.num_assistant_tokens_schedule = {schedule!r}",
    ]
    if spec.decode.policy is KPolicy.CONFIDENCE:  # the draft stops when its top probability falls under it
        lines.append(f"assistant.generation_config.assistant_confidence_threshold = {spec.decode.confidence}")
    return lines


def hf_generate_code(spec: RunSpec, exit_layer: int | None = None) -> str:
    """A runnable transformers snippet: speculative (assisted) generation with this run's models,
    drafter, k, precisions and sampling. exit_layer: the resolved early-exit layer, needed when the
    run's drafter is early exit and spec.drafter.exit_layer is None (the default layer)."""
    kind, decode = spec.drafter.kind, spec.decode
    target_id = hub_id(spec.pair.target)
    model_draft = kind in (DrafterKind.DRAFT_MODEL, DrafterKind.CROSS_TOKENIZER, DrafterKind.STAGED)
    int8 = model_draft and spec.drafter.precision is Precision.INT8
    schedule = "heuristic" if decode.policy in (KPolicy.HEURISTIC, KPolicy.THEORY) else "constant"
    lines = ["import torch"]
    if int8:
        lines.append("from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic")
    lines += [
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        'device = "cpu"  # int8 drafts run on the CPU; the target is there with it' if int8 else
        'device = "cuda" if torch.cuda.is_available() else "cpu"',
        f"tok = AutoTokenizer.from_pretrained({target_id!r})",
        f"model = AutoModelForCausalLM.from_pretrained({target_id!r}, dtype={_dtype(spec.pair.target_precision)}).to(device)",
    ]
    if decode.policy is KPolicy.THEORY and (model_draft or kind is DrafterKind.EARLY_EXIT):
        lines.append("# The playground's 'adaptive (theory)' k has no transformers equivalent: "
                     "the heuristic schedule is the nearest.")
    if decode.tree is not None:
        lines.append(f"# The playground drafted a token tree ({decode.tree.label}); transformers has no token trees: "
                     f"its assisted generation drafts a chain (here of k = {decode.k}).")
    if kind is DrafterKind.STAGED:
        lines.append("# The playground's staged drafting (prompt lookup drafting for the draft model) has no transformers "
                     "equivalent: the draft model alone drafts here.")
    speculative = ""
    if kind in (DrafterKind.DRAFT_MODEL, DrafterKind.STAGED):
        lines += _draft_lines(spec, hub_id(spec.pair.draft), schedule)
        speculative = "assistant_model=assistant, "
    elif kind is DrafterKind.CROSS_TOKENIZER:  # transformers' universal assisted decoding (>= 4.46)
        lines += _draft_lines(spec, hub_id(spec.pair.draft), schedule)
        lines.append(f"assistant_tok = AutoTokenizer.from_pretrained({hub_id(spec.pair.draft)!r})  # its own tokenizer")
        speculative = "assistant_model=assistant, tokenizer=tok, assistant_tokenizer=assistant_tok, "
    elif kind is DrafterKind.PROMPT_LOOKUP:
        speculative = f"prompt_lookup_num_tokens={decode.k}, max_matching_ngram_size={spec.drafter.max_ngram}, "
    elif kind is DrafterKind.EARLY_EXIT:
        lines += [
            "# Early exit works best with models trained for it (LayerSkip, e.g. facebook/layerskip-llama3.2-1B).",
            f"model.generation_config.num_assistant_tokens = {decode.k}",
            f"model.generation_config.num_assistant_tokens_schedule = {schedule!r}",
        ]
        speculative = f"assistant_early_exit={_layer(spec, exit_layer)}, "
    if decode.temperature == 0:  # greedy
        sampling = "do_sample=False"
    else:
        sampling = f"do_sample=True, temperature={decode.temperature!r}, top_p={decode.top_p!r}, top_k={decode.top_k}"
    lines += ["", f"prompt = {spec.prompt!r}"]
    if spec.chat:
        lines += [
            "if tok.chat_template:",
            '    inputs = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,',
            '                                     return_tensors="pt", return_dict=True).to(device)',
            "else:",
            '    inputs = tok(prompt, return_tensors="pt").to(device)',
        ]
    else:
        lines.append('inputs = tok(prompt, return_tensors="pt").to(device)')
    lines += [
        "# repetition_penalty=1.0 (off) as in the playground: some models' generation_config sets one"
        + ("; top_k=0 is off, as in the playground" if decode.temperature and not decode.top_k else "") + ".",
        f"out = model.generate(**inputs, {speculative}max_new_tokens={decode.max_new_tokens}, {sampling}, "
        "repetition_penalty=1.0)",
        'print(tok.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))',
    ]
    return "\n".join(lines) + "\n"


def vllm_config(spec: RunSpec) -> dict | None:
    """The `speculative_config` for vLLM's `LLM(model=..., speculative_config=...)`; None when vLLM
    has no equivalent (early exit: no layer-skip self-speculation for ordinary models) or nothing
    drafts (the target alone)."""
    kind, k = spec.drafter.kind, spec.decode.k
    if kind in (DrafterKind.DRAFT_MODEL, DrafterKind.STAGED):  # staged: the draft model alone (a comment says so)
        return {"model": hub_id(spec.pair.draft), "num_speculative_tokens": k}
    if kind is DrafterKind.PROMPT_LOOKUP:
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": spec.drafter.max_ngram,
                "prompt_lookup_min": 1}
    return None


def vllm_code(spec: RunSpec, exit_layer: int | None = None) -> str:
    """A runnable vLLM snippet; for early exit, a comment-only snippet saying vLLM has no equivalent.
    (exit_layer is accepted for symmetry with hf_generate_code; vLLM has no use for it.)"""
    kind, decode, k = spec.drafter.kind, spec.decode, spec.decode.k
    if kind is DrafterKind.EARLY_EXIT:
        return ("# vLLM has no early-exit (layer-skip) self-speculation for ordinary models.\n"
                "# Use the draft model or prompt lookup drafter with vLLM, or HF's assistant_early_exit.\n")
    if kind is DrafterKind.CROSS_TOKENIZER:
        return ("# This run's draft has its own tokenizer. vLLM's draft-model speculation expects the target's\n"
                "# vocabulary; check your vLLM version's documentation for drafts with another vocabulary,\n"
                "# or use HF's universal assisted decoding (the transformers snippet).\n")
    config = vllm_config(spec)
    llm = f"model={hub_id(spec.pair.target)!r}"
    if spec.pair.target_precision in VLLM_DTYPES:
        llm += f", dtype={VLLM_DTYPES[spec.pair.target_precision]!r}"
    if config is not None:
        llm += f", speculative_config={config!r}"
    params = f"temperature={decode.temperature!r}, top_p={decode.top_p!r}, max_tokens={decode.max_new_tokens}"
    if decode.top_k:
        params += f", top_k={decode.top_k}"
    ask = ('out = llm.chat([{"role": "user", "content": prompt}], params)' if spec.chat else
           "out = llm.generate([prompt], params)")
    notes = []
    if decode.tree is not None:
        notes.append(f"# The playground drafted a token tree ({decode.tree.label}); vLLM's draft-model speculation "
                     f"drafts a chain (here of k = {k}).")
    if kind is DrafterKind.STAGED:
        notes.append("# The playground's staged drafting (prompt lookup drafting for the draft model) has no vLLM "
                     "equivalent: the draft model alone drafts here.")
    return "\n".join(notes + [
        "from vllm import LLM, SamplingParams",
        "",
        f"llm = LLM({llm})",
        f"params = SamplingParams({params})",
        f"prompt = {spec.prompt!r}",
        ask,
        "print(out[0].outputs[0].text)",
    ]) + "\n"
