"""Switching a loaded model to the kernels: its linears, norms and attention, or whole decoder layers."""

from __future__ import annotations

import types

import torch

from playground.kernels.ops import NAME, Proj, attention, can_int4, library, linear, rms_norm, why_not


def _linear_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if x.dtype is not torch.bfloat16 or x.device.type != "cpu" or torch.is_grad_enabled() and x.requires_grad:
        return torch.nn.functional.linear(x, self.weight, self.bias)
    return linear(x, self.weight, self.bias)


NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm")


def _norm_forward(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    if x.dtype is not torch.bfloat16 or self.weight.dtype is not torch.bfloat16 or x.device.type != "cpu":
        return type(self).forward(self, x)
    return rms_norm(x, self.weight, self.variance_epsilon)


Quant = tuple[str, int] | None  # how a Proj stores its weight: None (bf16), ("int8", 0), ("int4", group size)


def _proj(weight: torch.Tensor, bias: torch.Tensor | None, quant: Quant) -> Proj:
    if quant is None:
        return Proj(weight, bias)
    if quant[0] == "int4":
        return Proj(weight, bias, int4=True, group_size=quant[1])
    return Proj(weight, bias, int8=True)


def _fused(linears: list[torch.nn.Linear], quant: Quant) -> Proj:
    """One Proj for several Linears that read the same input (q, k, v; gate, up): their rows stacked. In bf16
    the Linears keep views of the stacked weight (no second copy); every element is computed as before."""
    parts = [(l.weight, l.bias) for l in linears]
    weight = torch.cat([w.detach() for w, _ in parts]) if len(parts) > 1 else parts[0][0].detach()
    bias = None if parts[0][1] is None else torch.cat([b.detach() for _, b in parts])
    if quant is None and len(parts) > 1:
        start = 0
        for l, (w, b) in zip(linears, parts):
            l.weight.data = weight[start : start + w.shape[0]]
            if b is not None:
                l.bias.data = bias[start : start + w.shape[0]]
            start += w.shape[0]
    return _proj(weight, bias, quant)


# ---------------------------------------------------------------- a whole decoder layer

LAYERS = ("LlamaDecoderLayer", "Qwen2DecoderLayer", "MistralDecoderLayer")  # the layers _layer_forward computes


def _fusable(layer: torch.nn.Module) -> bool:
    """A Llama-family decoder layer: RMSNorms, q/k/v/o projections, a SiLU-gated MLP, bf16 weights."""
    a, m = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    return (
        type(layer).__name__ in LAYERS
        and a is not None
        and m is not None
        and all(isinstance(getattr(a, n, None), torch.nn.Linear) for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
        and all(isinstance(getattr(m, n, None), torch.nn.Linear) for n in ("gate_proj", "up_proj", "down_proj"))
        and type(getattr(m, "act_fn", None)).__name__ in ("SiLU", "SiLUActivation")
        and type(layer.input_layernorm).__name__ in NORMS
        and type(layer.post_attention_layernorm).__name__ in NORMS
        and a.q_proj.weight.dtype is torch.bfloat16
        and getattr(a.config, "pretraining_tp", 1) == 1
    )


def _fuse_layer(layer: torch.nn.Module, quant: Quant = None) -> None:
    """The layer's projections as Procs (kept on the layer): q/k/v stacked, o, gate/up stacked, down."""
    if hasattr(layer, "_bi"):
        return
    a, m = layer.self_attn, layer.mlp
    D = a.head_dim
    layer._bi = types.SimpleNamespace(
        heads=a.q_proj.weight.shape[0] // D,
        kv_heads=a.k_proj.weight.shape[0] // D,
        head_dim=D,
        qkv=_fused([a.q_proj, a.k_proj, a.v_proj], quant),
        o=_fused([a.o_proj], quant),
        gate_up=_fused([m.gate_proj, m.up_proj], quant),
        down=_fused([m.down_proj], quant),
    )


_rotary_memo: list = [None]  # the last (cos, sin) converted: every layer of a pass gets the same tensors


def _rotary(position_embeddings: tuple, B: int, S: int, D: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin as contiguous bf16 (B, S, D), converted once per pass (the model hands each layer the same pair)."""
    cos, sin = position_embeddings
    memo = _rotary_memo[0]
    if memo is not None and memo[0] is cos and memo[1] is sin and memo[2].shape == (B, S, D):
        return memo[2], memo[3]
    out = tuple(t.to(torch.bfloat16).expand(B, S, D).contiguous() for t in position_embeddings)
    _rotary_memo[0] = (cos, sin, *out)
    return out


def _layer_forward(
    self: torch.nn.Module,
    hidden_states: torch.Tensor,
    attention_mask=None,
    position_ids=None,
    cache=None,
    use_cache=False,
    position_embeddings=None,
    **kwargs,
) -> torch.Tensor:
    """The decoder layer in nine kernel calls: norm, q/k/v, rotary, attention, o + residual, norm, gate/up,
    SiLU * up, down + residual (HF's layer runs about forty torch ops)."""
    if hidden_states.dtype is not torch.bfloat16 or torch.is_grad_enabled() or position_embeddings is None:
        return type(self).forward(
            self,
            hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=use_cache,
            position_embeddings=position_embeddings,
            **kwargs,
        )
    lib, f = library(), self._bi
    B, S, _ = hidden_states.shape
    H, Hkv, D = f.heads, f.kv_heads, f.head_dim
    x = hidden_states if hidden_states.is_contiguous() else hidden_states.contiguous()
    qkv = f.qkv(rms_norm(x, self.input_layernorm.weight, self.input_layernorm.variance_epsilon))
    cos, sin = _rotary(position_embeddings, B, S, D)
    q = torch.empty((B, H, S, D), dtype=torch.bfloat16)
    k = torch.empty((B, Hkv, S, D), dtype=torch.bfloat16)
    v = torch.empty((B, Hkv, S, D), dtype=torch.bfloat16)
    lib.bi_rotary_split(
        qkv.data_ptr(), B, S, H, Hkv, D, cos.data_ptr(), sin.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr()
    )
    if cache is not None:
        k, v = cache.update(k, v, self.self_attn.layer_idx)
    out, _ = attention(self.self_attn, q, k, v, attention_mask, self.self_attn.scaling)
    x = f.o(out.view(B, S, H * D), residual=x)
    gate_up = f.gate_up(
        rms_norm(x, self.post_attention_layernorm.weight, self.post_attention_layernorm.variance_epsilon)
    )
    act = torch.empty((B, S, gate_up.shape[-1] // 2), dtype=torch.bfloat16)
    lib.bi_silu_mul(gate_up.data_ptr(), B * S, act.shape[-1], act.data_ptr())
    return f.down(act, residual=x)


def _head_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return self._bi(x)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)  # None when causal suffices, else a bool mask


def can_make_invariant(model: torch.nn.Module) -> str | None:
    """None when make_invariant applies to this model, else why not."""
    if model.device.type != "cpu":
        return f"batch-invariant kernels are CPU kernels; this model is on {model.device.type}"
    dtype = getattr(model, "dtype", None)
    if dtype is not torch.bfloat16:
        return f"the model is {str(dtype).replace('torch.', '')}, not bf16"
    head_dim = getattr(model.config, "head_dim", None) or model.config.hidden_size // model.config.num_attention_heads
    if head_dim % 16 or head_dim > 256:
        return f"the kernels take head sizes that are multiples of 16 up to 256, not {head_dim}"
    return why_not()


def make_invariant(model: torch.nn.Module, on: bool = True) -> bool:
    """Switch a bf16 CPU model's linears and attention to the batch-invariant kernels (on=False: back to
    torch's). Returns whether the model now runs them."""
    if on and can_make_invariant(model):
        return False
    previous = getattr(model, "_stock_attention", None)
    if on:
        _register()
        if previous is None:
            model._stock_attention = model.config._attn_implementation
        model.set_attn_implementation(NAME)
    elif previous is not None:
        model.set_attn_implementation(previous)
        del model._stock_attention
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight.dtype is torch.bfloat16:
            patch = _linear_forward
        elif type(module).__name__ in NORMS:
            patch = _norm_forward
        elif _fusable(module):
            patch = _layer_forward
            if on:
                _fuse_layer(module)
        else:
            continue
        if on:
            module.forward = types.MethodType(patch, module)
        elif "forward" in module.__dict__:
            del module.forward
    model._invariant = on
    return on


def is_invariant(model: torch.nn.Module) -> bool:
    return bool(getattr(model, "_invariant", False))


def can_quantize_int8(model: torch.nn.Module) -> str | None:
    """None when quantize_int8 applies (a bf16 CPU model of Llama-family layers, and these kernels), else why not."""
    why = can_make_invariant(model)
    if why is None and not any(_fusable(m) for m in model.modules()):
        why = f"{type(model).__name__}'s layers are not of the Llama family the fused layers compute"
    return why


def can_quantize_int4(model: torch.nn.Module, group_size: int = 32) -> str | None:
    """None when quantize_int4 applies (as quantize_int8, and group_size divides every Linear's input size), else
    why not."""
    why = can_quantize_int8(model)
    for module in model.modules() if why is None else ():
        if isinstance(module, torch.nn.Linear):
            why = why or can_int4(module.in_features, group_size)
    return why


def quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    """A draft's weights in int8 (one scale per output row), in place: every Linear and the LM head (a tied head
    gets an int8 copy; the embedding stays bf16), the decoder layers fused. The bf16 weights of the Linears are
    freed. Only the draft proposes, so its precision changes how often drafts are accepted, never the output."""
    why = can_quantize_int8(model)
    if why:
        raise RuntimeError(why)
    return _quantize(model, ("int8", 0), ("int8", 0))


def quantize_int4(model: torch.nn.Module, group_size: int = 32, head: bool = True) -> torch.nn.Module:
    """A draft's weights in int4 (symmetric groups of group_size along K, a bf16 scale per group: ops.quantize_i4),
    in place, as quantize_int8 does it: every Linear, the decoder layers fused, their bf16 weights freed. head: the LM
    head in int4 too (a tied head gets an int4 copy; the embedding stays bf16); head=False keeps the head in bf16 on
    the batch-invariant bf16 kernel (no copy: a tied head stays the embedding itself)."""
    why = can_quantize_int4(model, group_size)
    if why:
        raise RuntimeError(why)
    int4 = ("int4", group_size)
    return _quantize(model, int4, int4 if head else None)


def _quantize(model: torch.nn.Module, layers: Quant, head: Quant) -> torch.nn.Module:
    """The layers' projections (fused) in `layers`, every other Linear (the LM head) in `head` (None: bf16)."""
    _register()
    model.set_attn_implementation(NAME)
    embedding = model.get_input_embeddings().weight
    for module in list(model.modules()):
        if _fusable(module):
            if hasattr(module, "_bi"):  # fused in bf16 by make_invariant: its Linears are views of the stacked rows
                del module._bi
            _fuse_layer(module, layers)
            module.forward = types.MethodType(_layer_forward, module)
            for lin in (
                *(getattr(module.self_attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")),
                *(getattr(module.mlp, n) for n in ("gate_proj", "up_proj", "down_proj")),
            ):
                lin.weight.data = lin.weight.data.new_empty(0)  # the quantised copy in module._bi replaces it
        elif isinstance(module, torch.nn.Linear) and module.weight.dtype is torch.bfloat16 and module.weight.numel():
            if head is None:
                module.forward = types.MethodType(_linear_forward, module)
                continue
            module._bi = _proj(module.weight, module.bias, head)
            module.forward = types.MethodType(_head_forward, module)
            if module.weight is not embedding:
                module.weight.data = module.weight.data.new_empty(0)
        elif type(module).__name__ in NORMS:
            module.forward = types.MethodType(_norm_forward, module)
    setattr(model, f"_{layers[0]}_bytes", sum(p.nbytes() for m in model.modules() for p in _procs(m)))
    return model


def _procs(module: torch.nn.Module) -> list[Proj]:
    bi = getattr(module, "_bi", None)
    if isinstance(bi, Proj):
        return [bi]
    if isinstance(bi, types.SimpleNamespace):
        return [bi.qkv, bi.o, bi.gate_up, bi.down]
    return []
