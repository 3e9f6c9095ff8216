"""The compiled kernels (one C source per instruction set, each built once into the cache), the choice of the
variant this CPU runs, and the ops on tensors that call it."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from playground import settings

NAME = "invariant"  # the attention implementation's name in transformers' registry
HERE = Path(__file__).parent
COMMON = ["-O3", "-fopenmp", "-shared", "-fPIC"]


@dataclass(frozen=True)
class Variant:
    """One build of the kernels: a C source for one instruction set, the CPU flags it needs, its compiler flags.
    Every variant computes each element by one fixed sequence, the same for every row count (batch-invariant);
    two variants may differ from each other in the last bits."""

    name: str
    source: str
    flags: tuple[str, ...]
    needs: tuple[str, ...] = ()  # /proc/cpuinfo flags
    x86: bool = True


# The first variant this CPU runs is the one chosen (PLAYGROUND_KERNELS=auto); PLAYGROUND_KERNELS=<name> forces one.
# No AMX variant yet: AMX tiles were never run on this project's machines (docs/exactness.md).
VARIANTS = (
    Variant(
        "avx512",
        "avx512.c",
        ("-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni"),
        ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni"),
    ),
    Variant("avx2", "avx2.c", ("-mavx2", "-mfma", "-mf16c", "-ffp-contract=off"), ("avx2", "fma", "f16c")),
    Variant("portable", "portable.c", ("-ffp-contract=off", "-Wno-psabi"), x86=False),
)
BY_NAME = {v.name: v for v in VARIANTS}

_lock = threading.RLock()
_libs: dict[str, ctypes.CDLL | str] = {}  # a variant's library, or why it cannot run here
_active: list[str | None] = []  # [the variant the ops call] once chosen; [None] when none runs
_i64 = ctypes.c_int64
_ptr = ctypes.c_void_p


def cpu_flags() -> set[str]:
    try:
        line = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return set()
    return set(line.split(":", 1)[-1].split())


def unsupported(name: str) -> str | None:
    """None when this CPU can run the variant, else why not."""
    import platform

    variant = BY_NAME[name]
    if variant.x86 and platform.machine().lower() not in ("x86_64", "amd64"):
        return f"the {name} kernels are x86-64 code; this CPU is {platform.machine()}"
    missing = [f for f in variant.needs if f not in cpu_flags()]
    return f"this CPU lacks {', '.join(missing)}" if missing else None


def cpu_supported() -> str | None:
    """None when this CPU can run the variant PLAYGROUND_KERNELS asks for (auto: any), else why not."""
    wanted = settings.read().kernels
    if wanted == "off":  # the switch: kernels reported unavailable
        return "PLAYGROUND_KERNELS=off"
    if wanted != "auto":
        why = unsupported(wanted)
        return f"PLAYGROUND_KERNELS={wanted}, but {why}" if why else None
    return None if any(unsupported(v.name) is None for v in VARIANTS) else "no kernel variant runs on this CPU"


def runnable() -> list[str]:
    """The variants this CPU can execute, best first (the tests run each)."""
    return [v.name for v in VARIANTS if unsupported(v.name) is None]


def _build_dir(variant: Variant) -> Path:
    """The library's folder in the cache, one per variant, sources and flags."""
    sources = b"".join((HERE / s).read_bytes() for s in sorted({variant.source, "portable.c"}))
    digest = hashlib.sha256(sources + " ".join([*COMMON, *variant.flags]).encode()).hexdigest()[:16]
    return settings.read().cache / "kernels" / f"{variant.name}-{digest}"


def load(name: str) -> ctypes.CDLL | None:
    """A variant's library (built once into the cache), or None; `reason(name)` then says why."""
    with _lock:
        if name not in _libs:
            _libs[name] = _build(BY_NAME[name])
        lib = _libs[name]
        return lib if isinstance(lib, ctypes.CDLL) else None


def reason(name: str) -> str | None:
    """Why a variant cannot run here (None when it can)."""
    load(name)
    lib = _libs[name]
    return None if isinstance(lib, ctypes.CDLL) else lib


def _build(variant: Variant) -> ctypes.CDLL | str:
    why = unsupported(variant.name)
    if why:
        return why
    path = _build_dir(variant) / f"lib{variant.name}.so"
    if not path.exists():
        compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
        if not compiler:
            return "no C compiler (gcc) to build the kernels"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        command = [compiler, *COMMON, *variant.flags, str(HERE / variant.source), "-o", str(tmp)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            return "the kernels did not compile: " + (done.stderr.strip().splitlines() or ["?"])[-1][:200]
        os.replace(tmp, path)
    lib = ctypes.CDLL(str(path))  # after torch: its OpenMP runtime (libgomp) is the one the kernels use
    lib.bi_linear.argtypes = [_ptr, _i64, _i64, _ptr, _i64, _ptr, _ptr, _ptr]
    lib.bi_rotary_split.argtypes = [_ptr, _i64, _i64, _i64, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr]
    lib.bi_silu_mul.argtypes = [_ptr, _i64, _i64, _ptr]
    lib.bi_linear_ref.argtypes = lib.bi_linear.argtypes
    lib.bi_attention.argtypes = [*[_ptr] * 9, *[_i64] * 6, ctypes.c_float]
    lib.bi_attention_ref.argtypes = [*lib.bi_attention.argtypes, _ptr]
    lib.bi_linear_i8.argtypes = [_ptr, _i64, _i64, _ptr, _i64, _ptr, _ptr, _ptr, _ptr, _ptr]
    lib.bi_rmsnorm.argtypes = [_ptr, _i64, _i64, _ptr, ctypes.c_float, _ptr]
    lib.read_sum.argtypes = [_ptr, _i64, ctypes.c_int]
    lib.read_sum.restype = ctypes.c_double
    return lib


def _choose() -> str | None:
    """The variant PLAYGROUND_KERNELS asks for, or (auto) the first that runs here; None when none does."""
    wanted = settings.read().kernels
    if wanted == "off":
        return None
    for name in [wanted] if wanted != "auto" else [v.name for v in VARIANTS]:
        if load(name) is not None:
            return name
    return None


def variant() -> str | None:
    """The variant the ops run (None: none runs here; `why_not()` says why)."""
    with _lock:
        if not _active:
            _active.append(_choose())
        return _active[0]


def use(name: str | None) -> str | None:
    """Make the ops run another variant (the tests run each one the CPU can execute); returns the previous one."""
    with _lock:
        previous = variant()
        if name is not None and load(name) is None:
            raise RuntimeError(f"the {name} kernels cannot run here: {reason(name)}")
        _active[0] = name
        return previous


def library() -> ctypes.CDLL | None:
    """The library of the variant the ops run, or None; `why_not()` then says why."""
    name = variant()
    return None if name is None else load(name)


def why_not() -> str | None:
    """Why no kernels run here (None when they do)."""
    if variant() is not None:
        return None
    why = cpu_supported()
    if why:
        return why
    wanted = settings.read().kernels
    names = [wanted] if wanted != "auto" else [v.name for v in VARIANTS if unsupported(v.name) is None]
    return "; ".join(f"{n}: {reason(n)}" for n in names) if len(names) > 1 else reason(names[0])


def describe() -> str:
    """One line for the start-up: which kernels run and why."""
    name = variant()
    if name is None:
        return f"CPU kernels: torch's (no batch-invariant kernels: {why_not()})"
    how = "forced by PLAYGROUND_KERNELS" if settings.read().kernels != "auto" else "the best this CPU runs"
    amx = "; this CPU has AMX, which no variant uses yet" if "amx_bf16" in cpu_flags() else ""
    return f"CPU kernels: batch-invariant {name}, {how}{amx}"


def available() -> bool:
    return library() is not None


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
