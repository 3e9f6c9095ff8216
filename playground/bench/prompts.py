"""The benchmark's prompt set: one prompt per category, built in or from a JSON file; and the repetitive workload
(repetitive.json: a code file edited three times in a row, a multi-turn chat that quotes itself), where text
repeats and draft-free drafters (suffix decoding, prompt lookup) have something to draft from."""

from __future__ import annotations

import json
from pathlib import Path

from playground.core.errors import PlaygroundError

PROMPTS = {
    "code": "Write a Python function `is_prime(n)` that checks whether n is a prime number, with a docstring.",
    "story": "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "qa": "What causes the seasons on Earth? Explain briefly.",
    "summarisation": (
        "Summarise in two sentences: Speculative decoding speeds up large language model inference. "
        "A small draft model proposes several tokens, and the large target model checks them all in "
        "a single forward pass. Accepted tokens are kept, and the first rejected token is replaced by "
        "the target's own choice, so the output matches what the target alone would produce."
    ),
    "translation": "Translate into French: The weather is nice today, so we are going to the beach with our friends.",
    "math": "Solve step by step: a train travels 120 km in 1.5 hours. What is its average speed in km/h?",
}


REPETITIVE = Path(__file__).with_name("repetitive.json")


def load_prompts(path: str | None, categories: list[str] | None = None, repetitive: bool = False) -> dict[str, str]:
    """The built-in prompts, or a JSON file ({"category": "prompt"} or [{"category", "prompt"}]); repetitive: the
    repetitive workload's categories (REPETITIVE) after those. `categories` keeps only those, in that order."""
    prompts = dict(PROMPTS)
    if path:
        try:
            data = json.loads(Path(path).read_text())
            if isinstance(data, dict):
                prompts = {str(k): str(v) for k, v in data.items()}
            else:
                prompts = {str(item.get("category", f"prompt {i}")): str(item["prompt"]) for i, item in enumerate(data)}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise PlaygroundError(
                f"--prompts: cannot read {path!r} as {{category: prompt}} or "
                f"[{{category, prompt}}] JSON ({type(exc).__name__}: {exc})."
            ) from None
    if repetitive:
        prompts |= {item["category"]: item["prompt"] for item in json.loads(REPETITIVE.read_text(encoding="utf-8"))}
    if not prompts:
        raise PlaygroundError("--prompts: the prompt set is empty.")
    if categories:
        unknown = [c for c in categories if c not in prompts]
        if unknown:
            raise PlaygroundError(f"--categories: unknown {unknown}; the prompt set has {sorted(prompts)}.")
        prompts = {c: prompts[c] for c in dict.fromkeys(categories)}
    return prompts
