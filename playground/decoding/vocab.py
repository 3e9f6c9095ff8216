"""A draft's LM head over part of the vocabulary (FR-Spec, Zhao et al. 2025), still lossless.

A small draft spends a large share of each step on its LM head (the vocabulary times the hidden size: a quarter
of Qwen2.5 0.5B's bytes). The draft may propose from any distribution p it likes, so long as the acceptance rule
sees that p: here p is the draft's softmax over a subset of the vocabulary (its logits -inf elsewhere), and the
rule (sampling.py) stays exact. The subset:

- the first `size` token ids: a byte-level BPE tokenizer numbers its tokens in the order its merges were
  learned, most frequent first, so its first ids are a frequency ranking (FR-Spec ranks by corpus counts;
  this one needs no corpus);
- every token of the sequence so far (prompt and output): a text repeats its own rare words (names, the
  topic), which a fixed ranking misses;
- the model's end-of-sequence and other special ids.

The first `size` rows of the head are a view of its weight (no copy) and go through the head's own kernel; the
sequence's rarer tokens, a few dozen rows, through a small fp32 product.
"""

from __future__ import annotations

import torch

ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral")  # causal LMs whose logits are exactly lm_head(hidden)


def why_not(model: torch.nn.Module, size: int) -> str | None:
    """None when the head of `model` can be cut to `size` frequent tokens, else why not."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    vocab = getattr(getattr(head, "weight", None), "shape", (0,))[0] or getattr(getattr(head, "_bi", None), "n", 0)
    if getattr(model.config, "model_type", "") not in ARCHITECTURES or not hasattr(model, "model"):
        return f"a {getattr(model.config, 'model_type', type(model).__name__)} model's logits are not its head's alone"
    if getattr(head, "_bi", None) is None and not isinstance(head, torch.nn.Linear):
        return "its LM head is not a plain linear layer"
    if not vocab or size <= 0 or size >= vocab:
        return f"a subset of {size} tokens of a vocabulary of {vocab} is no subset"
    return None


class SubsetHead:
    """full_logits(hidden, ids): the draft's logits over the subset for the sequence `ids`, -inf elsewhere."""

    def __init__(self, model: torch.nn.Module, size: int):
        why = why_not(model, size)
        if why:
            raise ValueError(why)
        head = model.get_output_embeddings()
        self.size = size
        proj = getattr(head, "_bi", None)  # the int8 kernels' projection (kernels/model.py: quantize_int8)
        if proj is not None:
            self.vocab = proj.n
            self.frequent = proj.rows(size)
            self.rows = lambda ids: proj.dequantized(ids)  # noqa: E731
            self.bias = proj.bias
        else:
            self.vocab = head.weight.shape[0]
            weight, bias = head.weight.detach(), head.bias
            self.frequent = _linear(weight[:size], None if bias is None else bias[:size])
            self.rows = lambda ids: weight[ids].float()  # noqa: E731
            self.bias = bias
        eos = model.generation_config.eos_token_id if getattr(model, "generation_config", None) else None
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        specials = [t for t in (*eos, model.config.bos_token_id, model.config.pad_token_id) if t is not None]
        self.always = sorted({t for t in specials if size <= t < self.vocab})
        self.reset()

    def reset(self) -> None:
        self.seen: set[int] = set(self.always)  # tokens past the frequent ones that the subset holds
        self.extra = torch.tensor(self.always, dtype=torch.long)
        self.scanned = 0  # how much of the sequence has been looked at

    def add(self, ids: torch.Tensor) -> None:
        """Take the sequence's new tokens into the subset."""
        new = {t for t in ids[0, self.scanned :].tolist() if t >= self.size and t < self.vocab} - self.seen
        self.scanned = ids.shape[1]
        if new:
            self.seen |= new
            self.extra = torch.tensor(sorted(self.seen), dtype=torch.long)

    def full_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (H,) -> logits (vocab,) in fp32: the subset's, -inf elsewhere."""
        out = torch.full((self.vocab,), float("-inf"), device=hidden.device)
        out[: self.size] = self.frequent(hidden.view(1, -1))[0].float()
        if len(self.extra):
            extra = self.extra.to(hidden.device)
            values = self.rows(extra) @ hidden.float()
            if self.bias is not None:
                values = values + self.bias[extra].float()
            out[extra] = values
        return out


def _linear(weight: torch.Tensor, bias: torch.Tensor | None):
    """x -> x @ weight.T + bias, through the batch-invariant kernels where they run (a bf16 CPU weight)."""
    from playground.kernels import ops as kernel_ops

    if weight.dtype is torch.bfloat16 and weight.device.type == "cpu" and kernel_ops.available():
        return lambda x: kernel_ops.linear(x, weight, bias)
    return lambda x: torch.nn.functional.linear(x.to(weight.dtype), weight, bias)
