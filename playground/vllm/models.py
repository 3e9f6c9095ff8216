"""What vLLM is given for our models beyond their folder (models.model_folder): the context length its requests
need."""

from __future__ import annotations

import json
from pathlib import Path


def max_model_len(folder: str, ids: dict[str, list[int]], max_new_tokens: int) -> int:
    """vLLM's context length for these prompts: the longest prompt, the new tokens and room for a draft,
    at least 512 (vLLM's defaults take the model's whole context, 32k for Qwen2.5, which a small CPU KV cache
    refuses), at most the model's own (config.json's max_position_embeddings, when a folder has one)."""
    wanted = max(512, max(map(len, ids.values())) + max_new_tokens + 64)
    try:
        own = int(json.loads((Path(folder) / "config.json").read_text()).get("max_position_embeddings") or wanted)
    except (OSError, ValueError, TypeError):
        own = wanted
    return min(wanted, own)
