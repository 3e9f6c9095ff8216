"""A run, as code to take to production: a Hugging Face generate() snippet and a vLLM
`speculative_config`.

Input is the run's RunSpec, already validated (playground.run.spec), so nothing is range-checked here.
Every user-controlled string (model ids, the prompt) goes into the code through repr(), so quotes
or newlines in it stay inside a string literal; every number is an int or a float of the spec.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from dataclasses import replace

from playground import decoding
from playground.core.inputs import HUB_ID
from playground.core.config import KPolicy, Precision
from playground.run.spec import RunSpec

# The offline packs are GGUF re-uploads of these Hub models.
PACK_HUB_IDS = {
    "pack:qwen2.5-coder-0.5b-instruct": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
    "pack:qwen2.5-coder-1.5b-instruct": "Qwen/Qwen2.5-Coder-1.5B-Instruct",
}
TORCH_DTYPES = {Precision.FP32: "torch.float32", Precision.BF16: "torch.bfloat16", Precision.FP16: "torch.float16"}
VLLM_DTYPES = {Precision.FP32: "float32", Precision.BF16: "bfloat16", Precision.FP16: "float16"}


def hub_id(model: str, role: str = "model") -> str:
    """The Hub id for a known "pack:NAME" model; a placeholder for a local folder (the server's folders are not the
    reader's, nor theirs to see), as models.resolve tells one from a Hub id; any other (a Hub id, a pack) unchanged."""
    if model in PACK_HUB_IDS:
        return PACK_HUB_IDS[model]
    local = not (model.startswith("pack:") or HUB_ID.match(model)) or Path(model).expanduser().exists()
    return f"path/to/your/{role}-model" if local else model


def _options(spec: RunSpec, exit_layer: int | None) -> object:
    """The run's options, an early-exit layer they leave to the target (None) resolved to `exit_layer`."""
    options = spec.drafter.options
    if exit_layer is not None and getattr(options, "exit_layer", 0) is None:
        return replace(options, exit_layer=exit_layer)
    return options


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
    elif precision is Precision.INT4:  # the playground's own kernels: transformers has no such CPU draft
        lines += [
            "# The run drafted in int4 (groups of 32, the playground's CPU kernels), which transformers has no",
            "# equivalent of: this draft runs in bf16. The output is the target's either way; only acceptance differs.",
            f"assistant = AutoModelForCausalLM.from_pretrained({draft_id!r}, dtype=torch.bfloat16).to(device)",
        ]
    else:
        if precision is not None:
            lines.append(f"# The run drafted in {precision.value}.")
        lines.append(
            f"assistant = AutoModelForCausalLM.from_pretrained({draft_id!r}, dtype={_dtype(precision)}).to(device)"
        )
    lines += [
        f"assistant.generation_config.num_assistant_tokens = {spec.decode.k}",
        f"assistant.generation_config.num_assistant_tokens_schedule = {schedule!r}",
    ]
    if spec.decode.policy is KPolicy.CONFIDENCE:  # the draft stops when its top probability falls under it
        lines.append(f"assistant.generation_config.assistant_confidence_threshold = {spec.decode.confidence}")
    return lines


def hf_generate_code(spec: RunSpec, exit_layer: int | None = None) -> str:
    """A runnable transformers snippet: speculative (assisted) generation with this run's models,
    drafter, k, precisions and sampling, as the registry's one builder says (decoding.hf_generate). exit_layer: the
    resolved early-exit layer, needed when the run's drafter is early exit and its options.exit_layer is None (the
    default layer)."""
    strategy = decoding.strategy(spec.drafter.kind)
    run = decoding.hf_generate(spec.drafter.kind, _options(spec, exit_layer), spec.decode.k)
    speculative = "".join(f"{name}={_argument(value)}, " for name, value in run.arguments.items())
    return (
        "\n".join(
            _hf_setup(spec, strategy)
            + _hf_notes(spec, strategy)
            + _hf_drafting(spec, run)
            + _hf_prompt(spec)
            + _hf_generate(spec, speculative)
        )
        + "\n"
    )


# The snippet's variables for the objects transformers' arguments name (the draft and its tokenizer: _hf_drafting's)
VARIABLES = {
    decoding.HFObject.DRAFT: "assistant",
    decoding.HFObject.TARGET: "model",
    decoding.HFObject.TOKENIZER: "tok",
    decoding.HFObject.DRAFT_TOKENIZER: "assistant_tok",
}


def _argument(value: object) -> str:
    """A generate() argument as code: an object's variable, or a number of the spec (repr: a literal)."""
    return VARIABLES[value] if isinstance(value, decoding.HFObject) else repr(value)


def _hf_drafting(spec: RunSpec, run: decoding.HFGenerate) -> list[str]:
    """The lines that set up the drafting: the draft (and its own tokenizer) loaded, k and the schedule on the
    drafting model's generation_config, the code that readies generate()."""
    lines = list(run.setup)
    if run.drafts is decoding.HFObject.DRAFT:
        lines += _draft_lines(spec, hub_id(spec.pair.draft, "draft"), _schedule(spec))
    elif run.drafts is not None:  # the target drafts with its own first layers
        model = VARIABLES[run.drafts]
        lines += [
            f"{model}.generation_config.num_assistant_tokens = {spec.decode.k}",
            f"{model}.generation_config.num_assistant_tokens_schedule = {_schedule(spec)!r}",
        ]
    if decoding.HFObject.DRAFT_TOKENIZER in run.arguments.values():
        draft_id = hub_id(spec.pair.draft, "draft")
        lines.append(f"assistant_tok = AutoTokenizer.from_pretrained({draft_id!r})  # its own tokenizer")
    return lines


def _schedule(spec: RunSpec) -> str:
    """transformers' num_assistant_tokens_schedule nearest to the run's k policy."""
    return "heuristic" if spec.decode.policy in (KPolicy.HEURISTIC, KPolicy.THEORY) else "constant"


def _hf_setup(spec: RunSpec, strategy: decoding.Strategy) -> list[str]:
    """The imports, the device, the tokenizer and the target."""
    target_id = hub_id(spec.pair.target, "target")
    int8 = strategy.draft_model and spec.drafter.precision is Precision.INT8
    lines = ["import torch"]
    if int8:
        lines.append("from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic")
    return lines + [
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        'device = "cpu"  # int8 drafts run on the CPU; the target is there with it'
        if int8
        else 'device = "cuda" if torch.cuda.is_available() else "cpu"',
        f"tok = AutoTokenizer.from_pretrained({target_id!r})",
        f"model = AutoModelForCausalLM.from_pretrained({target_id!r}, dtype={_dtype(spec.pair.target_precision)}).to(device)",
    ]


def _hf_notes(spec: RunSpec, strategy: decoding.Strategy) -> list[str]:
    """What of the run the snippet cannot reproduce, as comments."""
    decode, notes = spec.decode, []
    if decode.policy is KPolicy.THEORY and strategy.model:  # a model drafts: the snippet has a schedule
        notes.append(
            "# The playground's 'adaptive (theory)' k has no transformers equivalent: "
            "the heuristic schedule is the nearest."
        )
    if decode.tree is not None:
        notes.append(
            f"# The playground drafted a token tree ({decode.tree.label}); transformers has no token trees: "
            f"its assisted generation drafts a chain (here of k = {decode.k})."
        )
    return notes + _note(spec, strategy.hf, "transformers")


def _note(spec: RunSpec, peer: decoding.Peer, tool: str) -> list[str]:
    """The peer's note on the strategy (Strategy.hf, .vllm: what the code does not do), as comment lines; a peer
    with no equivalent and no note says so."""
    note = peer.note or (
        f"{tool} has no equivalent of the playground's {spec.drafter.kind.value!r} drafter: this runs the target alone."
        if peer.adapter == decoding.NONE
        else ""
    )
    return ["# " + line for line in note.format(tool=tool).splitlines()]


def _hf_prompt(spec: RunSpec) -> list[str]:
    lines = ["", f"prompt = {spec.prompt!r}"]
    if not spec.chat:
        return lines + ['inputs = tok(prompt, return_tensors="pt").to(device)']
    return lines + [
        "if tok.chat_template:",
        '    inputs = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,',
        '                                     return_tensors="pt", return_dict=True).to(device)',
        "else:",
        '    inputs = tok(prompt, return_tensors="pt").to(device)',
    ]


def _hf_generate(spec: RunSpec, speculative: str) -> list[str]:
    decode = spec.decode
    if decode.temperature == 0:  # greedy
        sampling = "do_sample=False"
    else:
        sampling = f"do_sample=True, temperature={decode.temperature!r}, top_p={decode.top_p!r}, top_k={decode.top_k}"
    return [
        "# repetition_penalty=1.0 (off) as in the playground: some models' generation_config sets one"
        + ("; top_k=0 is off, as in the playground" if decode.temperature and not decode.top_k else "")
        + ".",
        f"out = model.generate(**inputs, {speculative}max_new_tokens={decode.max_new_tokens}, {sampling}, "
        "repetition_penalty=1.0)",
        'print(tok.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))',
    ]


def vllm_config(spec: RunSpec) -> dict | None:
    """The `speculative_config` for vLLM's `LLM(model=..., speculative_config=...)`; None when vLLM
    has no equivalent (early exit: no layer-skip self-speculation for ordinary models) or nothing
    drafts (the target alone): the registry's one builder (decoding.speculative_config), with the draft's Hub id.
    Staged runs the draft model alone (its note says so); suffix needs vLLM >= 0.11 and Arctic Inference."""
    draft = hub_id(spec.pair.draft, "draft") if spec.pair.draft else None
    return decoding.speculative_config(spec.drafter.kind, spec.drafter.options, spec.decode.k, draft)


def vllm_code(spec: RunSpec, exit_layer: int | None = None) -> str:
    """A runnable vLLM snippet (a script: vLLM starts worker processes, so the engine is created under
    `if __name__ == "__main__":`); for early exit, a comment-only snippet saying vLLM has no equivalent.
    (exit_layer is accepted for symmetry with hf_generate_code; vLLM has no use for it.)"""
    peer, decode, k = decoding.strategy(spec.drafter.kind).vllm, spec.decode, spec.decode.k
    if peer.adapter == decoding.NONE:  # no equivalent: the note alone
        return "".join(line + "\n" for line in _note(spec, peer, "vLLM"))
    params = f"temperature={decode.temperature!r}, top_p={decode.top_p!r}, max_tokens={decode.max_new_tokens}"
    if decode.top_k:
        params += f", top_k={decode.top_k}"
    if spec.chat:  # as the playground: the chat template when the tokenizer has one, else the raw prompt
        ask = [
            "    if llm.get_tokenizer().chat_template:",
            '        out = llm.chat([{"role": "user", "content": prompt}], params)',
            "    else:",
            "        out = llm.generate([prompt], params)",
        ]
    else:
        ask = ["    out = llm.generate([prompt], params)"]
    notes = []
    if decode.tree is not None:
        notes.append(
            f"# The playground drafted a token tree ({decode.tree.label}); vLLM drafts a chain here (of k = {k})."
        )
    notes += _note(spec, peer, "vLLM")
    return (
        "\n".join(
            notes
            + [
                "from vllm import LLM, SamplingParams",
                "",
                f"params = SamplingParams({params})",
                f"prompt = {spec.prompt!r}",
                "",
                'if __name__ == "__main__":  # vLLM starts worker processes: create the engine in the main one only',
                f"    llm = LLM({_llm_arguments(spec)})",
                *ask,
                "    print(out[0].outputs[0].text)",
            ]
        )
        + "\n"
    )


def _llm_arguments(spec: RunSpec) -> str:
    """LLM(...)'s arguments: the target, its precision, the speculative config."""
    config = vllm_config(spec)
    llm = f"model={hub_id(spec.pair.target, 'target')!r}"
    if spec.pair.target_precision in VLLM_DTYPES:
        llm += f", dtype={VLLM_DTYPES[spec.pair.target_precision]!r}"
    if config is not None:
        llm += f", speculative_config={config!r}"
    return llm


def vllm_serve_command(spec: RunSpec, tensor_parallel: int = 4, pipeline_parallel: int = 2, port: int = 8000) -> str:
    """vLLM's OpenAI-compatible server for this run's pair and speculative config, as shell command lines: one GPU,
    `tensor_parallel` GPUs of one node, and `tensor_parallel` x `pipeline_parallel` GPUs over nodes through Ray;
    then the Compare pairs tab reads it by URL. Every user string is shell-quoted (shlex.quote)."""
    peer = decoding.strategy(spec.drafter.kind).vllm
    if peer.adapter == decoding.NONE:  # no equivalent: the note alone
        return "".join(line + "\n" for line in _note(spec, peer, "vLLM"))
    config = vllm_config(spec)
    args = [f"--port {port}"]
    if spec.pair.target_precision in VLLM_DTYPES:
        args.append(f"--dtype {VLLM_DTYPES[spec.pair.target_precision]}")
    if config is not None:
        args.append(f"--speculative-config {shlex.quote(json.dumps(config))}")
    serve = f"vllm serve {shlex.quote(hub_id(spec.pair.target, 'target'))} " + " ".join(args)
    gpus = tensor_parallel * pipeline_parallel
    lines = [
        "# One GPU:",
        serve,
        f"# One node of {tensor_parallel} GPUs (tensor parallel: each layer split over the GPUs):",
        f"{serve} --tensor-parallel-size {tensor_parallel}",
        f"# {pipeline_parallel} nodes of {tensor_parallel} GPUs ({gpus} in all; tensor parallel in a node, pipeline",
        "# parallel across nodes): start a Ray cluster first (ray start --head on this node, ray start",
        "# --address=HEAD:6379 on the others), then on the head node:",
        f"{serve} --tensor-parallel-size {tensor_parallel} --pipeline-parallel-size {pipeline_parallel} "
        "--distributed-executor-backend ray",
        f"# Then point the playground's Compare pairs tab at http://HOST:{port} (vLLM engine row: a vLLM server).",
    ]
    if config is not None:
        lines.append(
            "# For its speedup, also serve the target alone (the same command without --speculative-config) on "
            "another port."
        )
    return "\n".join(lines) + "\n"
