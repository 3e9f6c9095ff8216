"""A model's size before it loads, for every architecture transformers knows: its config.json checked field by field
(an absurd or non-finite size is refused, naming the field), then the model built on the meta device, where a
parameter is a shape and nothing is allocated, and its parameters and buffers counted. Never remote code."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterator

import torch
from transformers import CONFIG_MAPPING, AutoModelForCausalLM

from playground.core.errors import PlaygroundError, shown
from playground.models.catalog import PACK_PREFIX
from playground.models.packs import PACKS, cache_dir
from playground.core.numbers import is_int

# The largest value each size may take, far above any released model (the largest have about 130 layers, a hidden
# size of 16k, 260k tokens): a config beyond one is refused before anything is built (a meta model of a million layers
# would take hours to build). Keys are transformers' common names; a config may spell them its own way (GPT-2's
# n_layer, n_embd), found through its config class's attribute_map.
SIZE_LIMITS = {
    "num_hidden_layers": 1024,
    "hidden_size": 2**20,
    "intermediate_size": 2**20,
    "vocab_size": 2**22,
    "num_attention_heads": 2**12,
    "num_key_value_heads": 2**12,
    "head_dim": 2**16,
    "max_position_embeddings": 2**24,
    "n_inner": 2**20,
    "ffn_dim": 2**20,
    "num_local_experts": 2**12,
    "num_experts": 2**12,
}


def model_config(source: str | Path) -> dict | None:
    """The config.json of a resolved model spec (models.resolve) without its weights: a local folder's, a converted
    pack's, a Hub id's from the local Hugging Face cache; None when there is none to read."""
    if isinstance(source, str) and source.startswith(PACK_PREFIX):
        path = cache_dir() / "converted" / source[len(PACK_PREFIX) :] / "config.json"
    elif isinstance(source, Path):
        path = source / "config.json"
    else:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(source, "config.json")
        path = Path(cached) if isinstance(cached, str) else None
    if path is None or not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        raise PlaygroundError("The model's config.json is not valid JSON.") from None
    if not isinstance(config, dict):
        raise PlaygroundError("The model's config.json does not hold a JSON object.")
    return config


def _fields(config: dict, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(dotted path, key, value) of every field, nested configs (text_config, ...) included."""
    for key, value in config.items():
        where = f"{path}{key}"
        if isinstance(value, dict):
            yield from _fields(value, where + ".")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    yield from _fields(item, f"{where}[{i}].")
                else:
                    yield f"{where}[{i}]", key, item
        else:
            yield where, key, value


def check_config(config: dict) -> None:
    """Refuse a config whose numbers cannot describe a model that could load: a non-finite number anywhere
    (1e400 reads as infinity), a size that is not a whole number or beyond SIZE_LIMITS; the message names the field."""
    model_type = config.get("model_type")
    known = CONFIG_MAPPING[model_type] if isinstance(model_type, str) and model_type in CONFIG_MAPPING else None
    spelled = {theirs: ours for ours, theirs in getattr(known, "attribute_map", {}).items()}
    for where, key, value in _fields(config):
        if isinstance(value, float) and not math.isfinite(value):
            raise PlaygroundError(
                f"The model's config.json sets {where} to {value}, not a finite number: the model "
                f"cannot be sized or loaded. Fix that field of its config.json."
            )
        name = spelled.get(key, key)
        if name not in SIZE_LIMITS or value is None:
            continue
        limit = SIZE_LIMITS[name]
        if not is_int(value) or not 0 <= value <= limit:
            raise PlaygroundError(
                f"The model's config.json sets {where} = {shown(value)}: {name.replace('_', ' ')} "
                f"must be a whole number from 0 to {limit:,}. The model is refused before loading."
            )


def config_size(config: dict) -> tuple[int, int] | None:
    """(parameters, bytes of buffers) of the model a checked config describes, counted on the meta device; None when
    transformers cannot build it (an architecture it does not know, or one that needs remote code: loading says why)."""
    check_config(config)
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return None
    try:
        cfg = CONFIG_MAPPING[model_type].from_dict(config)
        with torch.device("meta"):  # shapes only: nothing is allocated, whatever the sizes say
            model = AutoModelForCausalLM.from_config(cfg, trust_remote_code=False)
    except Exception:  # noqa: BLE001  any failure to build is the loader's to report, with its own message
        return None
    params = sum(p.numel() for p in model.parameters())  # tied weights once
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return params, buffers


def config_params(config: dict) -> int | None:
    """The parameters a config.json implies, counted on the meta device (every architecture transformers knows)."""
    size = config_size(config)
    return size[0] if size else None


def pack_params(source: str) -> int | None:
    """A pack's parameter count as its entry records it (used while it is not converted yet)."""
    pack = PACKS.get(source[len(PACK_PREFIX) :]) if source.startswith(PACK_PREFIX) else None
    return pack.params if pack else None
