"""Loading one model: device and precision, spec resolution (pack, Hub id, allowed local folder),
safetensors only and never remote code, the tokenizer check, the memory estimate."""

from __future__ import annotations

import ctypes
import hashlib
import json
import gc
import os
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from playground.env import settings
from playground.kernels import model as kernel_model, ops as kernel_ops
from playground.core.errors import PlaygroundError, shown, without_paths
from playground.core import inputs
from playground.models.catalog import PACK_PREFIX
from playground.models.packs import PACKS, cache_dir, convert_pack
from playground.models.size import config_size, model_config, pack_params
from playground.core.progress import Progress, quiet
from playground.core.config import Precision

# ---------------------------------------------------------------- device, dtype, paths


def choose_device() -> torch.device:
    """CUDA when present, else CPU; PLAYGROUND_DEVICE overrides."""
    name = settings.read().device or ("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float": "fp32"}


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX), as torch itself detects it."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def default_target_precision(device: torch.device | None = None) -> Precision:
    """bf16 (or fp16) on CUDA; on CPU bf16 when the CPU has native bf16 (there a target step is cheaper than
    in fp32, and scoring several tokens in one pass costs about one step: docs/levers.md), else fp32.
    $PLAYGROUND_DTYPE overrides (fp32, bf16, fp16 or torch's names)."""
    device = device or choose_device()
    env = settings.read().dtype
    if env:
        return _precision(env, "PLAYGROUND_DTYPE")
    if device.type == "cuda":
        return Precision.BF16 if torch.cuda.is_bf16_supported() else Precision.FP16
    return Precision.BF16 if cpu_has_native_bf16() else Precision.FP32


def default_draft_precision(device: torch.device | None = None, build: bool = True) -> Precision:
    """int4 on CPU where the batch-invariant kernels run (the fastest draft there end to end: docs/levers.md),
    else int8; the target's precision on CUDA. A draft whose shapes int4 refuses takes int8 instead
    (draft_fallback). $PLAYGROUND_DRAFT_PRECISION overrides. build=False: answered without building the kernels
    (kernels.build.expected), for the page's label."""
    device = device or choose_device()
    env = settings.read().draft_precision
    if env:
        return _precision(env, "PLAYGROUND_DRAFT_PRECISION")
    if device.type != "cpu":
        return default_target_precision(device)
    runs = kernel_ops.why_not() is None if build else kernel_ops.expected()
    return Precision.INT4 if runs else Precision.INT8


def draft_fallback(precision: Precision) -> Precision | None:
    """The precision a default int4 draft takes where its model's shapes refuse int4 (kernel_model.can_quantize_int4):
    int8. None for any other, and where the settings name the draft precision: a precision asked for by name is
    refused with the reason instead."""
    named = bool(settings.read().draft_precision)
    return Precision.INT8 if Precision(precision) is Precision.INT4 and not named else None


def _precision(name: str, where: str) -> Precision:
    try:
        return Precision(_ALIASES.get(name.strip(), name.strip()))
    except ValueError:
        raise PlaygroundError(f"{where} must be one of fp32, bf16, fp16, int8, int4; got {shown(name)}.") from None


def load_dtype(precision: Precision, device: torch.device | None = None) -> torch.dtype:
    """The dtype weights load in: the precision's, but int8 loads bf16 where the kernels quantise it and fp32 where
    torch's dynamic quantisation does; int4 loads bf16 (only the kernels quantise it)."""
    device = device or choose_device()
    if Precision(precision) is Precision.INT4:
        return torch.bfloat16
    if Precision(precision) is Precision.INT8 and device.type == "cpu" and kernel_ops.available():
        return torch.bfloat16
    return torch_dtype(precision)


def torch_dtype(precision: Precision) -> torch.dtype:
    """The dtype weights load in (int8 loads fp32 and is quantised after; int4 loads bf16)."""
    table = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16, Precision.INT4: torch.bfloat16}
    return table.get(Precision(precision), torch.float32)


def model_roots() -> list[Path]:
    """Folders local models may be loaded from: $PLAYGROUND_MODEL_ROOTS (os.pathsep-separated), default ./models and the cache."""
    return [r.resolve() for r in settings.read().model_roots] + [cache_dir().resolve()]


# ---------------------------------------------------------------- loading

HUB_ID = inputs.HUB_ID


def resolve(spec: str) -> str | Path:
    """A model spec -> a local folder (Path) or a checked Hub id (str). Raises PlaygroundError."""
    spec = (spec or "").strip()
    if not spec:
        raise PlaygroundError("A model id is empty.")
    if len(spec) > 200:
        raise PlaygroundError("A model id is too long (200 characters at most).")
    if spec.startswith(PACK_PREFIX):
        name = spec[len(PACK_PREFIX) :]
        if name not in PACKS:
            raise PlaygroundError(f"Unknown model pack {shown(name)}. Known packs: {', '.join(PACKS)}.")
        return spec
    looks_local = spec.startswith(("/", ".", "~")) or os.sep in spec.replace("/", os.sep) and Path(spec).exists()
    if looks_local or ".." in spec:
        path = Path(spec).expanduser().resolve()
        if not any(path == root or root in path.parents for root in model_roots()):
            raise PlaygroundError(  # the roots themselves are the server's paths: not named here
                f"Local model folders must be inside the allowed model roots (the folders the app's "
                f"PLAYGROUND_MODEL_ROOTS names, and its model cache); {shown(spec)} is not."
            )
        if not (path / "config.json").is_file():
            raise PlaygroundError(f"No model found at {shown(spec)} (it has no config.json).")
        return path
    if not HUB_ID.match(spec):
        raise PlaygroundError(
            f"{shown(spec)} is neither a Hub id (owner/name), a known pack, nor an allowed local folder."
        )
    return spec


def model_folder(spec: str) -> str:
    """The folder a model spec names on disk, for a loader other than ours (vLLM, stock transformers): the converted
    folder of a pack (converted now when it is not yet), a local folder, or a Hub id as it is."""
    source = resolve(spec)
    if isinstance(source, str) and source.startswith(PACK_PREFIX):
        source = convert_pack(PACKS[source[len(PACK_PREFIX) :]])
    return str(source)


def load_model(
    spec: str, device: torch.device | None = None, precision: Precision | None = None, progress: Progress = quiet
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load (model, tokenizer) for a spec: safetensors only, never remote code."""
    model, tokenizer, _ = load_precision(spec, device, precision, progress)
    return model, tokenizer


def load_precision(
    spec: str,
    device: torch.device | None = None,
    precision: Precision | None = None,
    progress: Progress = quiet,
    fallback: Precision | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase, Precision]:
    """load_model, and the precision the model got: `precision`, or `fallback` (draft_fallback: a default int4 draft
    whose shapes int4 refuses gets int8, and says so in progress)."""
    device = device or choose_device()
    precision = Precision(precision or default_target_precision(device))
    if precision is Precision.INT4:  # kernel_model.quantize_int4 of the bf16 load; nothing else runs int4 here
        int4_unavailable(device)
    dtype = load_dtype(precision, device)
    source = resolve(spec)
    if isinstance(source, str) and source.startswith(PACK_PREFIX):
        source = convert_pack(PACKS[source[len(PACK_PREFIX) :]], progress, dtype)
    progress(f"Loading {spec}", 0.9)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, trust_remote_code=False, use_safetensors=True)
    except PlaygroundError:
        raise
    except Exception as exc:
        raise PlaygroundError(_load_error(spec, exc)) from exc
    model.to(device).eval()
    if device.type == "cpu":  # before the kernels stack q/k/v and gate/up: a clone after would hold them twice
        own_weights(model)
    why = kernel_model.can_quantize_int4(model) if precision is Precision.INT4 else None
    if why and fallback is not None:  # int4 and int8 load the same bf16 weights here: no second load
        progress(f"{spec}: {fallback.value} draft, the default int4 does not apply ({why})", 0.95)
        precision = fallback
    elif why:
        raise PlaygroundError(f"An int4 draft needs the batch-invariant CPU kernels' int4 linears, but {why}.")
    model = _quantise(model, precision, device, vnni=dtype is torch.bfloat16)
    if device.type == "cpu":
        torch.set_num_threads(max(1, os.cpu_count() or 1))
    release_memory()
    return model, tokenizer, precision


def _quantise(model: PreTrainedModel, precision: Precision, device: torch.device, vnni: bool) -> PreTrainedModel:
    """A loaded model at its precision: int8 through the kernels (AVX512-VNNI: the bf16 load's rows quantised) or
    torch's dynamic quantisation of the fp32 weights (kernel_model.quantize_int8 / speed.quantize_int8); int4
    through the kernels; else the batch-invariant kernels where they apply."""
    if precision is Precision.INT8:
        if device.type != "cpu":
            raise PlaygroundError("int8 (dynamic quantisation) is a CPU precision; on CUDA use bf16 or fp16.")
        if vnni and kernel_model.can_quantize_int8(model) is None:
            kernel_model.quantize_int8(model)  # the bf16 weights of its Linears are freed: only the int8 copy stays
        else:
            from playground.engine.speed import quantize_int8

            model = quantize_int8(model.float())  # the fp32 load is dropped: only the int8 copy stays in memory
    elif precision is Precision.INT4:
        kernel_model.quantize_int4(model)  # the bf16 weights of its Linears are freed: only the int4 copy stays
    elif kernel_model.can_make_invariant(model) is None:
        kernel_model.make_invariant(model)  # bf16 on this CPU: the kernels, until a run asks for torch's (runner)
    return model


def int4_unavailable(device: torch.device | None = None) -> None:
    """Raise PlaygroundError when an int4 draft cannot run here: int4 runs only on the CPU kernels."""
    device = device or choose_device()
    if device.type != "cpu":
        raise PlaygroundError(
            f"int4 is a CPU precision (the batch-invariant kernels); on {device.type} use bf16 or fp16."
        )
    why = kernel_ops.why_not()
    if why:
        raise PlaygroundError(f"An int4 draft needs the batch-invariant CPU kernels, which do not run here: {why}.")


def own_weights(model: PreTrainedModel) -> None:
    """Copy every tensor that is still a view of the safetensors file into memory of its own, so that
    the file's mapping is released. A model loaded at the file's dtype (the fp32 draft before int8)
    keeps its tensors mapped, and every page of the file it ever read stays resident (docs/memory.md)."""
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.device.type == "cpu" and not tensor.is_quantized:
            tensor.data = tensor.data.clone()


def release_memory() -> None:
    """Collect garbage and hand the heap's free pages back to the system (glibc's malloc_trim):
    loading and quantising free gigabytes that malloc would otherwise keep resident."""
    gc.collect()
    trim_heap()


def trim_heap() -> None:
    """Hand the heap's free pages back to the system (glibc's malloc_trim; a run's activations and caches, once
    freed, would otherwise stay resident). Elsewhere (macOS, musl) nothing: the allocator keeps its own policy."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _load_error(spec: str, exc: Exception) -> str:
    text = without_paths(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
    if "trust_remote_code" in str(exc):
        return f"{shown(spec)} needs custom code from its repository, which the playground never runs."
    if any(
        s in str(exc)
        for s in (
            "offline",
            "resolve",
            "Connection",
            "connect",
            "Max retries",
            "not a valid model identifier",
            "does not appear to have",
        )
    ):
        return (
            f"Could not load {shown(spec)}: it is not in the local cache and the Hub cannot be reached ({text[:200]})."
        )
    return f"Could not load {shown(spec)}: {text[:300]}"


def _vocab_digest(tokenizer: PreTrainedTokenizerBase) -> str:
    """A digest of the tokenizer's token -> id map, kept on the tokenizer for as long as its size does not change
    (an added token changes it): check_compatible runs on every click, where reading two whole vocabularies again
    delayed the first token (docs/first-minutes.md, round six)."""
    kept = tokenizer.__dict__.get("_playground_vocab_digest")
    if kept is not None and kept[0] == len(tokenizer):
        return kept[1]
    digest = hashlib.sha256(json.dumps(sorted(tokenizer.get_vocab().items())).encode()).hexdigest()
    tokenizer.__dict__["_playground_vocab_digest"] = (len(tokenizer), digest)
    return digest


def check_compatible(draft_tok: PreTrainedTokenizerBase, target_tok: PreTrainedTokenizerBase) -> None:
    """The draft model drafter compares token ids: both tokenizers must agree on them (the cross-tokenizer
    drafter does not need this)."""
    problems = []
    if len(draft_tok) != len(target_tok):
        problems.append(f"vocabulary sizes differ ({len(draft_tok)} vs {len(target_tok)})")
    for attr in ("eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id"):
        a, b = getattr(draft_tok, attr), getattr(target_tok, attr)
        if a != b:
            problems.append(f"{attr} differs ({a} vs {b})")
    if not problems and _vocab_digest(draft_tok) != _vocab_digest(target_tok):
        differing = sorted(set(draft_tok.get_vocab().items()) ^ set(target_tok.get_vocab().items()))[:3]
        problems.append(f"token ids differ (e.g. {differing})")
    if problems:
        raise PlaygroundError(
            "The draft and target tokenizers are incompatible: " + "; ".join(problems) + ". "
            "The 'draft model' drafter compares token ids; the 'cross-tokenizer draft model' "
            "drafter pairs models with different tokenizers (it translates drafts through text)."
        )


def eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    ids = set()
    for source in (getattr(model.generation_config, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(source)
    return ids


def memory_budget() -> int:
    """Bytes the model cache may hold: $PLAYGROUND_MEMORY_GB, else 80% of the GPU's memory
    (CUDA) or of the machine's RAM."""
    gb = settings.read().memory_gb
    if gb is not None:
        return int(gb * 2**30)
    device = choose_device()
    if device.type == "cuda":
        return int(0.8 * torch.cuda.get_device_properties(device).total_memory)
    import psutil

    return int(0.8 * psutil.virtual_memory().total)


def estimate_bytes(spec: str, precision: Precision | None = None) -> int | None:
    """Peak bytes a model takes while it loads (int8 and int4 load in bf16 or fp32 first: load_dtype), from its config and
    what is on disk, whichever is larger; None when unknown (a Hub id whose config is not in the local cache). The config
    is sized on the meta device (models.size), so every architecture counts, and an absurd or non-finite size is
    refused naming its field."""
    precision = Precision(precision or default_target_precision())
    size = torch.finfo(load_dtype(precision)).bits // 8
    source = resolve(spec)
    config = model_config(source)
    counted = config_size(config) if config is not None else None
    need = counted[0] * size + counted[1] if counted else 0
    if isinstance(source, str) and source.startswith(PACK_PREFIX):
        return max(need, pack_params(source) * size)
    if isinstance(source, Path):
        stored = sum(f.stat().st_size for f in source.glob("*.safetensors"))
        try:
            stored_dtype = (config or {}).get("dtype") or (config or {}).get("torch_dtype") or "float32"
            stored_size = torch.finfo(getattr(torch, stored_dtype)).bits // 8
        except (AttributeError, TypeError):
            stored_size = 4
        return max(stored * size // stored_size, need)
    return need or None
