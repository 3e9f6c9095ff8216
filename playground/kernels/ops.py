"""The compiled kernels (invariant.c, built once into the cache) and the ops on tensors that call them."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import threading
from pathlib import Path

import torch

from playground import settings

NAME = "invariant"  # the attention implementation's name in transformers' registry
SOURCE = Path(__file__).parent / "invariant.c"
FLAGS = ["-O3", "-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni", "-fopenmp", "-shared", "-fPIC"]

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_why_not: str | None = None
_i64 = ctypes.c_int64
_ptr = ctypes.c_void_p


def cpu_supported() -> str | None:
    """None when this CPU can run the kernels, else why not."""
    import platform

    from playground import settings

    if not settings.read().kernels:  # the switch: kernels reported unavailable, as on a CPU without AVX512-BF16
        return "PLAYGROUND_KERNELS=off"
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"the kernels are written for x86-64 with AVX512-BF16; this CPU is {platform.machine()}"
    try:
        flags = next(
            line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")
        ).split()
    except (OSError, StopIteration):
        flags = []
    missing = [f for f in ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni") if f not in flags]
    if missing:
        return f"this CPU lacks {', '.join(missing)}"
    return None


def _build_dir() -> Path:
    """The library's folder in the cache, one per source and flags."""
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode()).hexdigest()[:16]
    return settings.read().cache / "kernels" / digest


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
        lib.bi_linear_ref.argtypes = lib.bi_linear.argtypes
        lib.bi_attention.argtypes = [
            _ptr,
            _ptr,
            _ptr,
            _ptr,
            _ptr,
            _ptr,
            _ptr,
            _ptr,
            _ptr,
            _i64,
            _i64,
            _i64,
            _i64,
            _i64,
            _i64,
            ctypes.c_float,
        ]
        lib.bi_attention_ref.argtypes = [*lib.bi_attention.argtypes, _ptr]
        lib.bi_linear_i8.argtypes = [_ptr, _i64, _i64, _ptr, _i64, _ptr, _ptr, _ptr, _ptr, _ptr]
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


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    reference: bool = False,
) -> torch.Tensor:
    """x @ weight.T + bias (+ residual, added to the rounded result), bf16, each output row a function of its
    own input row only. reference: the kernel's definition, one element at a time (slow; for the tests)."""
    K, N = x.shape[-1], weight.shape[0]
    flat = _rows(x)
    out = torch.empty((flat.shape[0], N), dtype=torch.bfloat16)
    resid = _rows(residual) if residual is not None else None
    fn = library().bi_linear_ref if reference else library().bi_linear
    fn(
        flat.data_ptr(),
        flat.shape[0],
        K,
        weight.data_ptr(),
        N,
        bias.data_ptr() if bias is not None else None,
        resid.data_ptr() if resid is not None else None,
        out.data_ptr(),
    )
    return out.view(*x.shape[:-1], N)


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


def attention(
    module: torch.nn.Module | None,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    reference: bool = False,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: query (B, H, Q, D), key / value (B, Hkv, T, D), a 4D mask (bool:
    True = seen; float: 0 = seen, the dtype's minimum = masked) or None (causal, queries last).
    Returns (B, Q, H, D). reference: the kernel's definition, one query at a time (for the tests)."""
    if kwargs.get("softcap") or kwargs.get("s_aux") is not None:
        raise NotImplementedError("the invariant attention has no logit soft-capping and no attention sinks")
    B, H, Q, D = query.shape
    Hkv, T = key.shape[1], key.shape[2]
    allowed = _allowed(attention_mask, B, Q, T)
    key, value = (t if t.stride(-1) == 1 else t.contiguous() for t in (key, value))
    query = query if query.stride(-1) == 1 else query.contiguous()
    out = torch.empty((B, Q, H, D), dtype=torch.bfloat16)
    scale = scaling if scaling is not None else D**-0.5
    args = [
        query.data_ptr(),
        _strides(query),
        key.data_ptr(),
        _strides(key),
        value.data_ptr(),
        _strides(value),
        allowed.data_ptr() if allowed is not None else None,
        _strides(allowed) if allowed is not None else None,
        out.data_ptr(),
        B,
        H,
        Hkv,
        Q,
        T,
        D,
        float(scale),
    ]
    if reference:
        scratch = torch.empty(2 * T * max(1, torch.get_num_threads()), dtype=torch.float32)
        library().bi_attention_ref(*args, scratch.data_ptr())
    else:
        library().bi_attention(*args)
    return out, None


# ---------------------------------------------------------------- projections: bf16 or int8 weights


class Proj:
    """One projection a kernel computes: a bf16 weight (N, K), or its int8 form (int8 rows, a scale per row, the
    rows' sums), and a bf16 bias or None. Called on x (..., K), with an optional residual to add."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, int8: bool = False):
        self.n, self.k = weight.shape
        self.bias = bias
        if int8:
            w = weight.detach().float()
            self.scale = (w.abs().amax(1) / 127).clamp_min(1e-12)
            self.q = (w / self.scale[:, None]).round().clamp(-127, 127).to(torch.int8)
            self.rowsum = self.q.sum(1, dtype=torch.int32)
            self.weight = None
        else:
            self.weight, self.q = weight.detach(), None

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if self.q is None:
            return linear(x, self.weight, self.bias, residual)
        flat = _rows(x)
        M = flat.shape[0]
        out = torch.empty((M, self.n), dtype=torch.bfloat16)
        resid = _rows(residual) if residual is not None else None
        library().bi_linear_i8(
            flat.data_ptr(),
            M,
            self.k,
            self.q.data_ptr(),
            self.n,
            self.scale.data_ptr(),
            self.rowsum.data_ptr(),
            self.bias.data_ptr() if self.bias is not None else None,
            resid.data_ptr() if resid is not None else None,
            out.data_ptr(),
        )
        return out.view(*x.shape[:-1], self.n)

    def rows(self, n: int) -> "Proj":
        """The first n output rows, as views of this one's storage (no copy)."""
        part = Proj.__new__(Proj)
        part.n, part.k = n, self.k
        part.bias = None if self.bias is None else self.bias[:n]
        part.weight = None if self.weight is None else self.weight[:n]
        part.q = None if self.q is None else self.q[:n]
        if self.q is not None:
            part.scale, part.rowsum = self.scale[:n], self.rowsum[:n]
        return part

    def dequantized(self, ids: torch.Tensor) -> torch.Tensor:
        """The weight's rows `ids` in fp32 (the int8 rows times their scales)."""
        if self.q is None:
            return self.weight[ids].float()
        return self.q[ids].float() * self.scale[ids, None]

    def nbytes(self) -> int:
        parts = [self.weight, self.bias] if self.q is None else [self.q, self.scale, self.rowsum, self.bias]
        return sum(t.numel() * t.element_size() for t in parts if t is not None)


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
