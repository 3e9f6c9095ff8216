"""Self int4 (quantised self-speculation): the target's own copy, its Linears in int4 (or int8) on the CPU kernels,
drafts for it on its own KV cache. The copy shares the target's embedding, norms and buffers (new Parameters over
the same storage: no bf16 copy of any weight); quantising it replaces the copy's Linear weights only, so the target
keeps its bf16 weights and its outputs. Made once per loaded target and kept in the model cache, counted there."""

from __future__ import annotations

import copy
import itertools
import types
from typing import Iterator

import torch
from transformers import PreTrainedModel

from playground.core.config import DrafterKind
from playground.decoding.model import ModelDrafter
from playground.core.errors import PlaygroundError
from playground.kernels import model as kernel_model
from playground.core.progress import Progress, quiet

KERNEL_STATE = ("_bi", "forward")  # what the kernels set on a module (kernels/model.py): the target's, not the copy's
MODEL_STATE = ("_invariant", "_stock_attention", "_int8_bytes", "_int4_bytes")


class SelfQuantDrafter(ModelDrafter):
    """A model drafter whose model is the target's own quantised copy (quantised_copy)."""

    name = DrafterKind.SELF_QUANT.value


def why_not(target: PreTrainedModel, bits: int, group_size: int = 32) -> str | None:
    """None when the target's quantised copy can be made here, else why not (a sentence)."""
    why = kernel_model.can_quantize_int8(target)
    if why:
        return (
            f"self int4 drafts with the target's own copy on the CPU kernels, which cannot run it here: {why}. "
            "Choose another drafter, or a bf16 target on a CPU"
        )
    why = kernel_model.can_quantize_int4(target, group_size) if bits == 4 else None
    if why:
        return f"self int4 cannot quantise this target in groups of {group_size}: {why}. Choose another group size"
    return None


def shared_copy(model: PreTrainedModel) -> PreTrainedModel:
    """A copy of the module tree that shares every weight's storage and nothing that quantising mutates: each
    Parameter a new Parameter over the same storage (tied ones stay tied), each buffer a new tensor over the same
    storage. The kernels' state on the model (fused projections, switched forwards) is left out of the copy."""
    memo: dict[int, object] = {}
    for t in itertools.chain(model.parameters(), model.buffers()):
        is_param = isinstance(t, torch.nn.Parameter)
        memo[id(t)] = torch.nn.Parameter(t.data, requires_grad=t.requires_grad) if is_param else t.detach()
    for module in model.modules():
        for name in KERNEL_STATE:
            if name in module.__dict__:
                memo[id(module.__dict__[name])] = None  # not copied (the fused bf16 weights would be)
    out = copy.deepcopy(model, memo)
    for module in out.modules():
        for name in KERNEL_STATE:
            module.__dict__.pop(name, None)
    for name in MODEL_STATE:
        out.__dict__.pop(name, None)
    return out


def _kernel_tensors(module: torch.nn.Module) -> Iterator[torch.Tensor]:
    """The tensors of the projections the kernels keep on a module (`_bi`: one, or a layer's several), whatever
    their class (int8's Proj, int4's)."""
    bi = module.__dict__.get("_bi")
    procs = list(vars(bi).values()) if isinstance(bi, types.SimpleNamespace) else [bi] if bi is not None else []
    for proc in procs:
        yield from (v for v in getattr(proc, "__dict__", {}).values() if isinstance(v, torch.Tensor))


def added_bytes(copied: PreTrainedModel, model: PreTrainedModel) -> int:
    """The bytes the copy holds beyond the storage it shares with `model`: its quantised weights (kept outside its
    parameters by the kernels) and any tensor of its own, each storage once."""
    shared = {t.untyped_storage().data_ptr() for t in itertools.chain(model.parameters(), model.buffers())}
    own: dict[int, int] = {}
    kernels = (t for m in copied.modules() for t in _kernel_tensors(m))
    for t in itertools.chain(copied.parameters(), copied.buffers(), kernels):
        storage = t.untyped_storage()
        if t.numel() and storage.data_ptr() not in shared:
            own[storage.data_ptr()] = storage.nbytes()
    return sum(own.values())


def estimate_bytes(model: PreTrainedModel, bits: int, group_size: int, head: bool) -> int:
    """About what the copy adds, before it is made: its Linears' weights at `bits` (half a byte, or a byte) with a
    bf16 scale per group (int4) or an fp32 scale and sum per row (int8); at int4 without `head`, no head."""
    out = 0
    output = model.get_output_embeddings()
    for module in model.modules():
        if not isinstance(module, torch.nn.Linear) or (module is output and bits == 4 and not head):
            continue
        n, k = module.out_features, module.in_features
        out += n * k // 2 + 2 * n * (k // group_size) if bits == 4 else n * k + 8 * n
    return out


def quantised_copy(
    pair, bits: int, group_size: int = 32, head: bool = True, progress: Progress = quiet
) -> PreTrainedModel:
    """The pair's target's own copy at `bits` (4: kernels.model.quantize_int4, `group_size` weights a scale, the LM
    head too where `head`; 8: quantize_int8, a scale per row, the head always), from the model cache when made;
    progress says when it is made and what it adds."""
    target = pair.target
    why = why_not(target, bits, group_size)
    if why:
        raise PlaygroundError(why + ".")

    need = estimate_bytes(target, bits, group_size, head)

    def make() -> PreTrainedModel:
        progress(
            f"Quantising the target's own copy to int{bits} for self int4 (once per loaded target; it adds about "
            f"{need / 1e9:.2f} GB, counted in the model cache's budget)",
            0.0,
        )
        copied = shared_copy(target)
        if bits == 4:
            kernel_model.quantize_int4(copied, group_size=group_size, head=head)
        else:
            kernel_model.quantize_int8(copied)
        copied._added_bytes = added_bytes(copied, target)
        return copied

    name = f"self int{bits}" + (f", groups of {group_size}, head {'int4' if head else 'unquantised'}") * (bits == 4)
    return pair.target_copy(name, make, need)
