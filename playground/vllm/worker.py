"""vLLM for the playground: one engine per process, many prompts per engine, each timed alone.

This file runs INSIDE vLLM's own environment (scripts/install_vllm.sh), never in the playground's:
it imports only the standard library, vllm and transformers (vLLM pins a transformers of its own).
The playground drives it through playground/vllm/engine.py:

    VENV/bin/python playground/vllm/worker.py REQUEST.json RESULT.json

REQUEST (JSON):
    action           "run" (default) or "probe" (versions and speculative features, no model loaded)
    target           the target's folder (HF safetensors)
    dtype            vLLM's dtype for both models: "bfloat16", "float32", "float16", "auto"
    speculative_config   vLLM's, used as sent (the playground's one builder, decoding.speculative_config, made
                     it); null or absent: the target alone. Its "model", where given, is the draft's folder
    requires         the Python packages its method needs here (a strategy's Peer.requires: Arctic Inference
                     for suffix decoding); a missing one is "unsupported"
    prompts          [{"id": str, and one of "token_ids": [int], "chat": user message (the target
                     tokenizer's chat template, one user turn), "text": raw text}]
    max_tokens       new tokens per prompt
    temperatures     [float], each prompt runs at each (default [0.0]); top_p (1.0), top_k (0: off)
    seed             the sampling seed of every request (default 0)
    repeats          timed runs of each prompt (default 1)
    warmup           one short untimed generation per temperature first (default true)
    ignore_eos       default false
    max_model_len (default 4096), enforce_eager (default false), kv_cache_gib (VLLM_CPU_KVCACHE_SPACE,
    default 1), cpu_threads_bind (VLLM_CPU_OMP_THREADS_BIND; default vLLM's "auto"),
    in_process (default false: vLLM's own processes; true: engine core and model in this one, faster to start)

RESULT (JSON): {"ok": true, "vllm_version", "torch_version", "transformers_version", "device", "features",
    "engine_kwargs", "load_s", "vocab_size", "results": [one per prompt, temperature and repeat: {"id",
    "temperature", "repeat", "prompt_token_ids", "token_ids", "text", "finish_reason", "wall_s", "ttft_s",
    "counters": {"num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos"}}],
    "totals": the counters over the timed runs}
or {"ok": false, "error": "model_missing" | "model_mismatch" | "unsupported" | "bad_request" | "crash",
    "message": ..., "traceback": ...}.

The counters are vLLM's own Prometheus counters (vllm/v1/spec_decode/metrics.py, read with
LLM.get_metrics(), which needs disable_log_stats=False), differenced around each generate call.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's folder (playground/vllm/) would come first on sys.path, and the package's
# modules would shadow other packages' top-level names (models.py, metrics.py, server.py): drop it. The
# client also starts python with -P, which leaves it out.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import importlib.util  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


class WorkerError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def set_environment(request: dict) -> None:
    """vLLM reads these when the engine starts: set them before it does."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(request.get("kv_cache_gib", 1))))
    if request.get("cpu_threads_bind"):
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(request["cpu_threads_bind"])
    if request.get("in_process"):  # engine core and model in this process: starts in a third of the time
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")  # its processes talk over loopback only
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: never wait on a hub
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")


def features() -> dict:
    """What this vLLM build offers for speculative decoding."""
    import typing

    import torch
    import transformers
    import vllm
    from vllm.config import speculative as spec_config

    def literals(tp) -> list[str]:
        out = []
        for arg in typing.get_args(tp):
            out += literals(arg) if typing.get_args(arg) else [arg]
        return out

    arctic = importlib.util.find_spec("arctic_inference") is not None
    try:
        from vllm.platforms import current_platform

        device = str(current_platform.device_type)
    except Exception:  # noqa: BLE001 - only a label
        device = "unknown"
    return {
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "device": device,
        "features": {"methods": sorted(set(literals(spec_config.SpeculativeMethod))), "arctic_inference": arctic},
    }


def check_folder(path: str | None, role: str) -> dict:
    if not path:
        raise WorkerError("bad_request", f"No {role} folder given.")
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config):
        raise WorkerError("model_missing", f"The {role} folder {path!r} has no config.json (not a model folder).")
    with open(config) as f:
        return json.load(f)


def speculative_config(request: dict, target_config: dict) -> dict | None:
    """The request's speculative_config as sent, after this side's own checks: the packages its method needs are
    installed, a draft model's vocabulary is the target's."""
    config = request.get("speculative_config")
    if config is None:
        return None
    if not isinstance(config, dict) or not config.get("method") or int(config.get("num_speculative_tokens", 0)) < 1:
        raise WorkerError(
            "bad_request", f"speculative_config needs a method and num_speculative_tokens >= 1: {config!r}"
        )
    missing = [m for m in request.get("requires") or [] if importlib.util.find_spec(str(m)) is None]
    if missing:
        raise WorkerError(
            "unsupported",
            f"vLLM's {config['method']!r} method needs {', '.join(missing)}, which this vLLM environment lacks.",
        )
    if config.get("model"):
        draft_config = check_folder(config["model"], "draft")
        if draft_config.get("vocab_size") != target_config.get("vocab_size"):
            raise WorkerError(
                "model_mismatch",
                (
                    f"The draft's vocabulary ({draft_config.get('vocab_size')} tokens) is not the target's "
                    f"({target_config.get('vocab_size')}): vLLM's draft-model speculation needs one shared tokenizer."
                ),
            )
    return dict(config)


def same_tokenizer(spec: dict | None, tokenizer) -> None:
    """A draft model's tokenizer must be the target's (vLLM's draft speculation shares the target's token ids)."""
    if not spec or not spec.get("model"):
        return
    from transformers import AutoTokenizer

    draft = AutoTokenizer.from_pretrained(spec["model"])
    if draft.get_vocab() != tokenizer.get_vocab():
        raise WorkerError(
            "model_mismatch",
            "The draft's tokenizer is not the target's (different vocabularies): "
            "vLLM's draft-model speculation needs one shared tokenizer.",
        )


def encode(prompt: dict, tokenizer, vocab_size: int) -> list[int]:
    if "token_ids" in prompt:
        ids = [int(t) for t in prompt["token_ids"]]
    elif "chat" in prompt and getattr(tokenizer, "chat_template", None):  # as the playground's runner.encode_prompt
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt["chat"]}], tokenize=False, add_generation_prompt=True
        )
        ids = tokenizer(text, add_special_tokens=False).input_ids
    elif "chat" in prompt:  # a model without a chat template sees the raw text, as in the playground
        ids = tokenizer(prompt["chat"]).input_ids
    elif "text" in prompt:
        ids = tokenizer(prompt["text"]).input_ids
    else:
        raise WorkerError("bad_request", f"Prompt {prompt.get('id')!r} has none of token_ids, chat, text.")
    if not ids:
        raise WorkerError("bad_request", f"Prompt {prompt.get('id')!r} encodes to no tokens.")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise WorkerError(
            "model_mismatch",
            (
                f"Prompt {prompt.get('id')!r} has token ids outside the target's vocabulary of {vocab_size} "
                f"(e.g. {bad[0]}): it was encoded with another model's tokenizer."
            ),
        )
    return ids


def snapshot(llm) -> dict:
    """vLLM's spec-decode counters now (summed over engines): zeros without speculation."""
    out = {name: 0 for name in COUNTERS}
    out["num_accepted_tokens_per_pos"] = []
    for metric in llm.get_metrics():
        name = metric.name.removeprefix("vllm:spec_decode_")
        if name in COUNTERS:
            out[name] += int(metric.value)
        elif name == "num_accepted_tokens_per_pos":
            pos = out[name]
            pos += [0] * (len(metric.values) - len(pos))
            for i, v in enumerate(metric.values):
                pos[i] += int(v)
    return out


def difference(after: dict, before: dict) -> dict:
    out = {name: after[name] - before[name] for name in COUNTERS}
    a, b = after["num_accepted_tokens_per_pos"], before["num_accepted_tokens_per_pos"]
    b = b + [0] * (len(a) - len(b))
    out["num_accepted_tokens_per_pos"] = [x - y for x, y in zip(a, b)]
    return out


def add(total: dict, part: dict) -> dict:
    out = {name: total[name] + part[name] for name in COUNTERS}
    a, b = total["num_accepted_tokens_per_pos"], part["num_accepted_tokens_per_pos"]
    n = max(len(a), len(b))
    out["num_accepted_tokens_per_pos"] = [x + y for x, y in zip(a + [0] * (n - len(a)), b + [0] * (n - len(b)))]
    return out


def engine_kwargs(request: dict, spec: dict | None) -> dict:
    """vLLM's LLM(...) arguments for the request: neutral defaults, not the model's repetition penalty or top_k."""
    kwargs = {
        "model": request["target"],
        "dtype": request.get("dtype", "auto"),
        "max_model_len": int(request.get("max_model_len", 4096)),
        "enforce_eager": bool(request.get("enforce_eager", False)),
        "seed": int(request.get("seed", 0)),
        "disable_log_stats": False,  # the spec-decode counters are only kept with stats on
        "generation_config": "vllm",
        "enable_prefix_caching": bool(request.get("prefix_caching", False)),
    }
    if spec is not None:
        kwargs["speculative_config"] = spec
    if request.get("in_process"):
        kwargs["distributed_executor_backend"] = "uni"
    return kwargs


def sampling(request: dict, temperature: float, tokens: int):
    from vllm import SamplingParams

    return SamplingParams(
        temperature=float(temperature),
        top_p=float(request.get("top_p", 1.0)),
        top_k=int(request.get("top_k", 0)) or 0,
        max_tokens=tokens,
        seed=int(request.get("seed", 0)),
        ignore_eos=bool(request.get("ignore_eos", False)),
        repetition_penalty=1.0,
    )


def timed(llm, request: dict, prompt_id: str, ids: list[int], temperature: float, repeat: int) -> dict:
    """One prompt generated at one temperature, timed alone, with the counters it moved."""
    before = snapshot(llm)
    start = time.perf_counter()
    params = sampling(request, temperature, int(request.get("max_tokens", 64)))
    output = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0]
    wall_s = time.perf_counter() - start
    counters = difference(snapshot(llm), before)
    stats = getattr(output, "metrics", None)
    ttft = None
    if stats is not None and getattr(stats, "first_token_ts", 0) and getattr(stats, "queued_ts", 0):
        ttft = stats.first_token_ts - stats.queued_ts
    completion = output.outputs[0]
    return {
        "id": prompt_id,
        "temperature": temperature,
        "repeat": repeat,
        "prompt_token_ids": ids,
        "token_ids": list(completion.token_ids),
        "text": completion.text,
        "finish_reason": completion.finish_reason,
        "wall_s": wall_s,
        "ttft_s": ttft,
        "counters": counters,
    }


def run(request: dict) -> dict:
    target_config = check_folder(request.get("target"), "target")
    spec = speculative_config(request, target_config)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(request["target"])
    same_tokenizer(spec, tokenizer)
    vocab_size = max(len(tokenizer), int(target_config.get("vocab_size") or 0))
    prompts = request.get("prompts") or []
    if not prompts:
        raise WorkerError("bad_request", "No prompts.")
    encoded = [(str(p.get("id", i)), encode(p, tokenizer, vocab_size)) for i, p in enumerate(prompts)]

    info = features()
    from vllm import LLM

    kwargs = engine_kwargs(request, spec)
    start = time.perf_counter()
    llm = LLM(**kwargs)
    load_s = time.perf_counter() - start

    max_tokens = int(request.get("max_tokens", 64))
    temperatures = [float(t) for t in request.get("temperatures", [0.0])]
    if request.get("warmup", True):
        for temperature in temperatures:
            params = sampling(request, temperature, min(8, max_tokens))
            llm.generate([{"prompt_token_ids": encoded[0][1]}], params, use_tqdm=False)
    results = []
    totals = snapshot(llm)
    totals = difference(totals, totals)
    for temperature in temperatures:
        for prompt_id, ids in encoded:
            for repeat in range(int(request.get("repeats", 1))):
                results.append(timed(llm, request, prompt_id, ids, temperature, repeat))
                totals = add(totals, results[-1]["counters"])
    return {
        "ok": True,
        **info,
        "engine_kwargs": kwargs,
        "load_s": load_s,
        "vocab_size": vocab_size,
        "env": {k: os.environ[k] for k in sorted(os.environ) if k.startswith("VLLM_CPU_")},
        "results": results,
        "totals": totals,
    }


def write(path: str, payload: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f)
    os.replace(tmp, path)  # the client never reads a half-written result


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python worker.py REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    request_path, result_path = argv[1], argv[2]
    try:
        with open(request_path) as f:
            request = json.load(f)
        set_environment(request)
        payload = {"ok": True, **features()} if request.get("action") == "probe" else run(request)
    except WorkerError as exc:
        payload = {"ok": False, "error": exc.kind, "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - everything else is reported as a crash, with its traceback
        payload = {
            "ok": False,
            "error": "crash",
            "message": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()[-6000:],
        }
    write(result_path, payload)
    sys.stdout.flush()
    return 0 if payload["ok"] else 1


if __name__ == "__main__":  # vLLM spawns processes: the engine is only ever created under this guard
    sys.exit(main(sys.argv))
