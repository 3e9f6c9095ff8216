"""How the target's bf16 linears and attention run on CPU: batch-invariant, and near the memory bandwidth.

Why: in bf16 the stock kernels give a position other logits when its pass holds another number of
positions (a 1-row linear takes another kernel than a 2..k-row one; attention reduces over its keys in
blocks that depend on the pass). The target alone scores one position per pass, verification k + 1, a
tree its nodes, a batch B (k + 1): near-ties then flip, and greedy speculative decoding stops being the
target's own output. The kernels of csrc/invariant.c compute every output element by one fixed sequence
of operations that depends only on that element's inputs (Thinking Machines, "Defeating Nondeterminism
in LLM Inference", 2025): a linear's row never sees the other rows, a query never sees the other
queries nor the keys masked away from it. A position's logits are then bitwise the same in every pass,
so the target alone, HF generate on the same model object, chains, trees and batches agree exactly.

They are also faster than the stock bf16 path here: a linear streams its weight once for all the rows of
a pass, straight from the nn.Linear's own storage (no repacking, no copy).

`make_invariant(model)` switches a loaded bf16 CPU model to them in place: every bf16 nn.Linear, the LM
head included, and the attention (registered with transformers as "invariant"). The norms, rotary
embedding, activations and residual adds are per-row or elementwise in torch already (tests check each
op). Needs an x86-64 CPU with AVX512-BF16 and a C compiler (the library is built once, in the cache);
elsewhere `available()` says why not and the model keeps torch's kernels. fp32 models are left alone
(torch's fp32 path is exact between passes here). CUDA is not covered: see docs/exactness.md.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import threading
import types
from pathlib import Path

import torch

NAME = "invariant"  # the attention implementation's name in transformers' registry
SOURCE = Path(__file__).parent / "csrc" / "invariant.c"
FLAGS = ["-O3", "-march=x86-64-v4", "-mavx512bf16", "-fopenmp", "-shared", "-fPIC"]

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_why_not: str | None = None
_i64 = ctypes.c_int64
_ptr = ctypes.c_void_p


def cpu_supported() -> str | None:
    """None when this CPU can run the kernels, else why not."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"the kernels are written for x86-64 with AVX512-BF16; this CPU is {platform.machine()}"
    if not getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
        return "this CPU has no AVX512-BF16 instructions"
    return None


def _build_dir() -> Path:
    from playground.models.packs import cache_dir

    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode()).hexdigest()[:16]
    return cache_dir() / "kernels" / digest


def library() -> ctypes.CDLL | None:
    """The compiled kernels (built once into the cache), or None; `why_not()` then says why."""
    global _lib, _why_not
    with _lock:
        if _lib is not None or _why_not is not None:
            return _lib
        _why_not = cpu_supported()
        if _why_not:
            return None
        path = _build_dir() / "libinvariant.so"
        if not path.exists():
            compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
            if not compiler:
                _why_not = "no C compiler (gcc) to build the kernels"
                return None
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            done = subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(tmp)], capture_output=True, text=True)
            if done.returncode:
                _why_not = "the kernels did not compile: " + (done.stderr.strip().splitlines() or ["?"])[-1][:200]
                return None
            os.replace(tmp, path)
        lib = ctypes.CDLL(str(path))  # after torch: its OpenMP runtime (libgomp) is the one the kernels use
        lib.bi_linear.argtypes = [_ptr, _i64, _i64, _ptr, _i64, _ptr, _ptr, _ptr]
        lib.bi_rotary_split.argtypes = [_ptr, _i64, _i64, _i64, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr]
        lib.bi_silu_mul.argtypes = [_ptr, _i64, _i64, _ptr]
        lib.bi_attention.argtypes = [_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr,
                                     _i64, _i64, _i64, _i64, _i64, _i64, ctypes.c_float, _ptr]
        lib.bi_rmsnorm.argtypes = [_ptr, _i64, _i64, _ptr, ctypes.c_float, _ptr]
        lib.read_sum.argtypes = [_ptr, _i64, ctypes.c_int]
        lib.read_sum.restype = ctypes.c_double
        _lib = lib
        return _lib


def available() -> bool:
    return library() is not None


def why_not() -> str | None:
    """Why the kernels cannot run here (None when they can)."""
    library()
    return _why_not


# ---------------------------------------------------------------- the ops

def _rows(x: torch.Tensor) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])
    return flat if flat.is_contiguous() else flat.contiguous()


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           residual: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T + bias (+ residual, added to the rounded result), bf16, each output row a function of its
    own input row only."""
    K, N = x.shape[-1], weight.shape[0]
    flat = _rows(x)
    out = torch.empty((flat.shape[0], N), dtype=torch.bfloat16)
    resid = _rows(residual) if residual is not None else None
    library().bi_linear(flat.data_ptr(), flat.shape[0], K, weight.data_ptr(), N,
                        bias.data_ptr() if bias is not None else None,
                        resid.data_ptr() if resid is not None else None, out.data_ptr())
    return out.view(*x.shape[:-1], N)


def _linear_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if x.dtype is not torch.bfloat16 or x.device.type != "cpu" or torch.is_grad_enabled() and x.requires_grad:
        return torch.nn.functional.linear(x, self.weight, self.bias)
    return linear(x, self.weight, self.bias)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama-style RMSNorm of each row of a bf16 x (fp32 statistics, bf16 result), row by row."""
    D = x.shape[-1]
    flat = x.reshape(-1, D)
    if not flat.is_contiguous():
        flat = flat.contiguous()
    out = torch.empty_like(flat)
    library().bi_rmsnorm(flat.data_ptr(), flat.shape[0], D, weight.data_ptr(), float(eps), out.data_ptr())
    return out.view(x.shape)


# The RMSNorm classes whose forward is weight * (x * rsqrt(mean(x^2) + eps)).to(bf16) (Gemma's adds 1 to
# its weight: not one of them).
NORMS = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm")


def _norm_forward(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    if x.dtype is not torch.bfloat16 or self.weight.dtype is not torch.bfloat16 or x.device.type != "cpu":
        return type(self).forward(self, x)
    return rms_norm(x, self.weight, self.variance_epsilon)


def _strides(t: torch.Tensor) -> ctypes.Array:
    return (_i64 * len(t.stride()))(*t.stride())


_memo: list = [None, None]  # the last mask converted and its uint8 form: every layer of a pass reuses it


def _allowed(mask: torch.Tensor | None, B: int, Q: int, T: int) -> torch.Tensor | None:
    """A 4D mask as uint8 (B, Q, T), 1 = seen (bool: True; float: above half the dtype's minimum)."""
    if mask is None:
        return None
    if _memo[0] is mask and _memo[1].shape == (B, Q, T):
        return _memo[1]
    m = mask[:, 0] if mask.ndim == 4 else mask
    m = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
    allowed = m[..., -T:].to(torch.uint8).expand(B, Q, T)
    _memo[0], _memo[1] = mask, allowed
    return allowed


def attention(module: torch.nn.Module | None, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
              **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: query (B, H, Q, D), key / value (B, Hkv, T, D), a 4D mask (bool:
    True = seen; float: 0 = seen, the dtype's minimum = masked) or None (causal, queries last).
    Returns (B, Q, H, D)."""
    if kwargs.get("softcap") or kwargs.get("s_aux") is not None:
        raise NotImplementedError("the invariant attention has no logit soft-capping and no attention sinks")
    B, H, Q, D = query.shape
    Hkv, T = key.shape[1], key.shape[2]
    allowed = _allowed(attention_mask, B, Q, T)
    key, value = (t if t.stride(-1) == 1 else t.contiguous() for t in (key, value))
    query = query if query.stride(-1) == 1 else query.contiguous()
    out = torch.empty((B, Q, H, D), dtype=torch.bfloat16)
    scratch = torch.empty(2 * T * max(1, torch.get_num_threads()), dtype=torch.float32)
    scale = scaling if scaling is not None else D ** -0.5
    library().bi_attention(query.data_ptr(), _strides(query), key.data_ptr(), _strides(key), value.data_ptr(),
                           _strides(value), allowed.data_ptr() if allowed is not None else None,
                           _strides(allowed) if allowed is not None else None, out.data_ptr(), B, H, Hkv, Q, T, D,
                           float(scale), scratch.data_ptr())
    return out, None


# ---------------------------------------------------------------- a whole decoder layer

LAYERS = ("LlamaDecoderLayer", "Qwen2DecoderLayer", "MistralDecoderLayer")  # the layers _layer_forward computes


def _fusable(layer: torch.nn.Module) -> bool:
    """A Llama-family decoder layer: RMSNorms, q/k/v/o projections, a SiLU-gated MLP, bf16 weights."""
    a, m = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    return (type(layer).__name__ in LAYERS and a is not None and m is not None
            and all(isinstance(getattr(a, n, None), torch.nn.Linear) for n in ("q_proj", "k_proj", "v_proj", "o_proj"))
            and all(isinstance(getattr(m, n, None), torch.nn.Linear) for n in ("gate_proj", "up_proj", "down_proj"))
            and type(getattr(m, "act_fn", None)).__name__ in ("SiLU", "SiLUActivation")
            and type(layer.input_layernorm).__name__ in NORMS and type(layer.post_attention_layernorm).__name__ in NORMS
            and a.q_proj.weight.dtype is torch.bfloat16 and getattr(a.config, "pretraining_tp", 1) == 1)


def _fuse_weights(layer: torch.nn.Module) -> None:
    """q, k, v (and gate, up) weights moved into one tensor each, the Linears keeping views of it (no copy
    stays behind): one kernel call per fused projection. Every element is computed as before."""
    if hasattr(layer, "_bi_qkv"):
        return
    def fuse(linears):
        for attr in ("weight", "bias"):
            parts = [getattr(l, attr) for l in linears]
            if parts[0] is None:
                yield None
                continue
            whole = torch.cat([p.detach() for p in parts]).contiguous()
            start = 0
            for l, p in zip(linears, parts):
                getattr(l, attr).data = whole[start : start + p.shape[0]]
                start += p.shape[0]
            yield whole
    a, m = layer.self_attn, layer.mlp
    layer._bi_qkv = tuple(fuse([a.q_proj, a.k_proj, a.v_proj]))
    layer._bi_gate_up = tuple(fuse([m.gate_proj, m.up_proj]))[0]


def _layer_forward(self: torch.nn.Module, hidden_states: torch.Tensor, attention_mask=None, position_ids=None,
                   cache=None, use_cache=False, position_embeddings=None, **kwargs) -> torch.Tensor:
    """The decoder layer in nine kernel calls: norm, q/k/v, rotary, attention, o + residual, norm, gate/up,
    SiLU * up, down + residual (HF's layer runs about forty torch ops)."""
    if hidden_states.dtype is not torch.bfloat16 or torch.is_grad_enabled() or position_embeddings is None:
        return type(self).forward(self, hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                                  cache=cache, use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
    lib = library()
    a = self.self_attn
    B, S, _ = hidden_states.shape
    D = a.head_dim
    H, Hkv = a.q_proj.weight.shape[0] // D, a.k_proj.weight.shape[0] // D
    x = hidden_states if hidden_states.is_contiguous() else hidden_states.contiguous()
    h = rms_norm(x, self.input_layernorm.weight, self.input_layernorm.variance_epsilon)
    qkv = linear(h, *self._bi_qkv)
    cos, sin = (t.to(torch.bfloat16).expand(B, S, D).contiguous() for t in position_embeddings)
    q = torch.empty((B, H, S, D), dtype=torch.bfloat16)
    k = torch.empty((B, Hkv, S, D), dtype=torch.bfloat16)
    v = torch.empty((B, Hkv, S, D), dtype=torch.bfloat16)
    lib.bi_rotary_split(qkv.data_ptr(), B, S, H, Hkv, D, cos.data_ptr(), sin.data_ptr(), q.data_ptr(), k.data_ptr(),
                        v.data_ptr())
    if cache is not None:
        k, v = cache.update(k, v, a.layer_idx)
    out, _ = attention(a, q, k, v, attention_mask, a.scaling)
    x = linear(out.view(B, S, H * D), a.o_proj.weight, a.o_proj.bias, residual=x)
    h = rms_norm(x, self.post_attention_layernorm.weight, self.post_attention_layernorm.variance_epsilon)
    gate_up = linear(h, self._bi_gate_up)
    inter = gate_up.shape[-1] // 2
    act = torch.empty((B, S, inter), dtype=torch.bfloat16)
    lib.bi_silu_mul(gate_up.data_ptr(), B * S, inter, act.data_ptr())
    down = self.mlp.down_proj
    return linear(act, down.weight, down.bias, residual=x)


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
                _fuse_weights(module)
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


# ---------------------------------------------------------------- the machine's read bandwidth

def read_bandwidth(gib: float = 1.0, reps: int = 5) -> float:
    """Bytes per second this machine reads from memory with every thread (the best of reps passes over a
    buffer much larger than the caches), measured by the library's streaming sum."""
    import time

    lib = library()
    if lib is None:
        raise RuntimeError(why_not())
    buf = torch.ones(int(gib * 2**30) // 4, dtype=torch.float32)
    lib.read_sum(buf.data_ptr(), buf.numel(), 1)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        lib.read_sum(buf.data_ptr(), buf.numel(), 1)
        best = min(best, time.perf_counter() - start)
    return buf.numel() * 4 / best
