"""Levers that make the engine faster without changing what the target decides.

- A cheaper draft: the draft only proposes, the target verifies, so a lower-precision draft
  keeps the output lossless and only changes how often drafts are accepted.
  "int8" quantises the draft's decoder Linear layers dynamically (per channel; the LM head
  stays fp32), "bf16" casts the whole draft. Copies are made once and cached.
- A verify kernel for short row blocks on CPU: MKL's fp32 GEMM for 4..64 rows (the k + 1 tokens
  the target checks at once) streams the weights several times; computing (W @ x^T)^T streams
  them once. Measured on 2 cores (Qwen2.5-Coder-1.5B, one verify forward): see docs/benchmarks.md.
  Single-token steps (the baseline, the draft) keep the default path.
"""
from __future__ import annotations

import copy
import types
import warnings
import weakref

import torch
from transformers import PreTrainedModel

DRAFT_PRECISIONS = ("fp32", "bf16", "int8")
_variants: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {precision: copy}, freed with it


def draft_variant(model: PreTrainedModel, precision: str) -> PreTrainedModel:
    """The draft in the given precision ("fp32" returns the model itself)."""
    if precision not in DRAFT_PRECISIONS:
        raise ValueError(f"draft precision must be one of {DRAFT_PRECISIONS}, got {precision!r}")
    if precision == "fp32" or (precision == "int8" and model.device.type != "cpu"):
        return model
    variants = _variants.setdefault(model, {})
    if precision not in variants:
        clone = copy.deepcopy(model)
        if precision == "bf16":
            clone = clone.to(torch.bfloat16)
        else:
            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # torch.ao's deprecation notices
                clone.model = quantize_dynamic(clone.model, {torch.nn.Linear: per_channel_dynamic_qconfig},
                                               dtype=torch.qint8)
        variants[precision] = clone.eval()
    return variants[precision]


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
