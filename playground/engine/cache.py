"""KV-cache helpers the drafters and the batched engine share, for HF's DynamicCache and the lean forward's cache
(kernels/step.py: the target's, where a chain's verification takes it)."""

from __future__ import annotations

from transformers import DynamicCache, PreTrainedModel

from playground.kernels.step import LeanForward, TargetCache


def draft_cache(model: PreTrainedModel) -> DynamicCache:
    """A KV cache a drafter can crop back anywhere: full layers for attention models, even those with
    sliding-window layers (Gemma 3, Mistral), whose own cache layers cannot be cropped once past their
    window; the model's mask applies the window. Other layer kinds (linear attention, Mamba) get the
    model's own cache."""
    kinds = set(getattr(model.config, "layer_types", None) or ())
    if kinds <= {"full_attention", "sliding_attention"}:
        return DynamicCache()
    return DynamicCache(config=model.config)


def crop_cache(cache: TargetCache, length: int) -> None:
    """Cut a KV cache back to its first `length` positions."""
    if isinstance(cache, LeanForward):
        cache.crop(length)
        return
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def cache_bytes(cache: TargetCache | None) -> int:
    """Bytes a KV cache's keys and values take now (0 for None)."""
    if isinstance(cache, LeanForward):
        return cache.nbytes()
    return sum(
        t.numel() * t.element_size()
        for layer in getattr(cache, "layers", [])
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
        if t is not None
    )


# A lean forward's own Python objects (its ctypes tables of the layers' pointers): tracemalloc's count of one on the
# tiny pairs (2 layers: 6.8 kB), as a fixed part and one per layer
LEAN_BYTES, LEAN_LAYER_BYTES = 3_000, 1_900


def kept_bytes(cache: TargetCache | None) -> int:
    """Bytes a sequence's cache keeps, for the sessions' budget: cache_bytes, and a lean forward's own buffers
    besides (its capacity's rotary tables); never the model's weights it reads."""
    if isinstance(cache, LeanForward):
        tables = LEAN_BYTES + LEAN_LAYER_BYTES * len(cache._layers)  # its ctypes tables of pointers, in Python's heap
        return cache.nbytes() + cache.cos.nbytes + cache.sin.nbytes + tables
    return cache_bytes(cache)
