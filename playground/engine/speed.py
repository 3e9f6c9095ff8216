"""Levers that make the engine faster without changing what the target decides.

- A cheaper draft: the draft only proposes, the target verifies, so a lower-precision draft
  keeps the output lossless and only changes how often drafts are accepted. "int8" quantises
  the draft's Linear layers dynamically (per channel), its LM head included, when the model
  cache loads it (models.load_model); the fp32 weights are not kept (the embeddings stay fp32:
  a lookup reads one row). The LM head is a large share of a small model's weights (the vocabulary
  times the hidden size), so quantising it too makes a draft step markedly cheaper (docs/levers.md).
- A verify kernel for short row blocks on CPU: MKL's fp32 GEMM for 4..64 rows (the k + 1 tokens
  the target checks at once) streams the weights several times; computing (W @ x^T)^T streams
  them once (docs/levers.md). Single-token steps (the baseline, the draft) keep the default path.
"""

from __future__ import annotations

import statistics
import types
import warnings

import torch
from transformers import PreTrainedModel

from playground.engine import clock
from playground.engine.cache import crop_cache
from playground.kernels.step import score, target_cache


def quantize_int8(model: PreTrainedModel) -> PreTrainedModel:
    """Per-channel dynamic int8 quantisation of every Linear layer, the LM head included, in place
    (a tied LM head gets an int8 copy; the embedding it was tied to stays fp32). For a draft on CPU:
    the target verifies, so the output stays lossless."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    def int8(module: torch.nn.Module) -> torch.nn.Module:
        return quantize_dynamic(module, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notices
        model.model = int8(model.model)
        head = model.get_output_embeddings()
        if isinstance(head, torch.nn.Linear):
            model.set_output_embeddings(int8(torch.nn.Sequential(head))[0])
    return model.eval()


def _block_linear(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    rows = x.numel() // x.shape[-1]
    if 4 <= rows <= 64:
        out = (self.weight @ x.reshape(rows, x.shape[-1]).t()).t()
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.weight.shape[0])
    return torch.nn.functional.linear(x, self.weight, self.bias)


def fast_verify(model: PreTrainedModel, on: bool = True) -> PreTrainedModel:
    """Switch the short-row-block kernel on (or off) for every fp32 Linear of a CPU model."""
    if model.device.type != "cpu":
        return model
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight.dtype == torch.float32:
            if on:
                module.forward = types.MethodType(_block_linear, module)
            elif "forward" in module.__dict__:
                del module.forward
    return model


@torch.inference_mode()
def verify_profile(
    target: PreTrainedModel, ns: tuple[int, ...] = (1, 2, 3, 5, 9, 17), context: int = 128, reps: int = 3, progress=None
) -> dict[int, float]:
    """V(n): median seconds of one target pass that scores n new tokens on top of a KV cache of
    `context` tokens, for each n (the cache is cut back after every pass)."""
    device = target.device
    vocab = target.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, context), generator=generator).to(device)
    cache = target_cache(target, context + max(ns))  # the engine's: a chain's verification passes go so
    score(target, ids, cache, 1)
    out: dict[int, float] = {}
    for i, n in enumerate(ns):
        feed = torch.randint(0, vocab, (1, n), generator=generator).to(device)
        times = []
        for _ in range(reps + 1):  # the first pass of a new shape warms its kernels: not counted
            start = clock(device)
            score(target, feed, cache, n)
            times.append(clock(device) - start)
            crop_cache(cache, context)
        out[n] = statistics.median(times[1:])
        if progress:
            progress(f"Measuring the cost of checking n tokens at once: n = {n}", (i + 1) / len(ns))
    return out
