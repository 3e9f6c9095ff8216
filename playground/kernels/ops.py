"""The ops on tensors that call the kernels of the variant this CPU runs (playground/kernels/build.py)."""

from __future__ import annotations

import ctypes

import torch

from playground.kernels.build import (  # noqa: F401 (the kernels' API, as callers know it)
    VARIANTS,
    available,
    cpu_flags,
    cpu_supported,
    describe,
    expected,
    library,
    load,
    reason,
    runnable,
    unsupported,
    use,
    variant,
    why_not,
)

NAME = "invariant"  # the attention implementation's name in transformers' registry
_i64 = ctypes.c_int64
_ptr = ctypes.c_void_p


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


# ---------------------------------------------------------------- projections: bf16, int8 or int4 weights

CHUNK_I4 = 128  # an int4 row is stored in chunks of 128 k (kernels/*.c: bi_linear_i4), K padded to a multiple


def can_int4(k: int, group_size: int) -> str | None:
    """None when a (N, k) weight can be quantised to int4 in groups of group_size, else why not."""
    if group_size <= 0 or group_size % 32:
        return f"the int4 group size must be a positive multiple of 32, not {group_size}"
    if k % group_size:
        return f"the int4 group size {group_size} does not divide the layer's input size {k}"
    return None


def quantize_i4(weight: torch.Tensor, group_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """A (N, K) weight as the int4 kernels take it: symmetric groups of group_size along K, scale = amax / 7 rounded
    to bf16, q = round(w / scale) clamped to -7..7, stored as q + 8 in nibbles (per 128 k, byte j: k0 + j low,
    k0 + 64 + j high; K padded to Kp, a multiple of 128, with q = 0). Returns (packed (N, Kp / 2) uint8, scales
    (N, ceil(Kp / group_size)) bf16, zeros past K)."""
    why = can_int4(weight.shape[1], group_size)
    if why:
        raise ValueError(why)
    n, k = weight.shape
    kp = -(-k // CHUNK_I4) * CHUNK_I4
    groups = weight.detach().float().view(n, k // group_size, group_size)
    scale = (groups.abs().amax(-1) / 7).to(torch.bfloat16)
    s = scale.float()[..., None]
    q = torch.where(s > 0, (groups / torch.where(s > 0, s, 1)).round().clamp(-7, 7), 0).view(n, k)
    u = torch.full((n, kp), 8, dtype=torch.uint8)
    u[:, :k] = (q + 8).to(torch.uint8)
    u = u.view(n, kp // CHUNK_I4, 2, CHUNK_I4 // 2)
    packed = (u[:, :, 0] | (u[:, :, 1] << 4)).reshape(n, kp // 2).contiguous()
    scales = torch.zeros((n, -(-kp // group_size)), dtype=torch.bfloat16)
    scales[:, : k // group_size] = scale
    return packed, scales


def dequantize_i4(packed: torch.Tensor, scales: torch.Tensor, k: int, group_size: int) -> torch.Tensor:
    """quantize_i4's weight back in fp32: (q - 8) * scale, the first k columns."""
    n = packed.shape[0]
    b = packed.view(n, -1, CHUNK_I4 // 2)
    u = torch.stack([b & 15, b >> 4], dim=2).reshape(n, -1)[:, :k]
    return (u.float() - 8) * scales.float().repeat_interleave(group_size, dim=1)[:, :k]


class Proj:
    """One projection a kernel computes: a bf16 weight (N, K); or its int8 form (int8 rows, a scale per row, the
    rows' sums); or its int4 form (quantize_i4: packed nibbles, a bf16 scale per group of `group` along K); and a
    bf16 bias or None. Called on x (..., K), with an optional residual to add."""

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        int8: bool = False,
        int4: bool = False,
        group_size: int = 32,
    ):
        self.n, self.k = weight.shape
        self.bias = bias
        self.weight = self.q = self.q4 = None
        if int4:
            self.group = group_size
            self.q4, self.scale4 = quantize_i4(weight, group_size)
        elif int8:
            w = weight.detach().float()
            self.scale = (w.abs().amax(1) / 127).clamp_min(1e-12)
            self.q = (w / self.scale[:, None]).round().clamp(-127, 127).to(torch.int8)
            self.rowsum = self.q.sum(1, dtype=torch.int32)
        else:
            self.weight = weight.detach()

    @property
    def precision(self) -> str:
        return "int4" if self.q4 is not None else "int8" if self.q is not None else "bf16"

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if self.weight is not None:
            return linear(x, self.weight, self.bias, residual)
        flat = _rows(x)
        M = flat.shape[0]
        out = torch.empty((M, self.n), dtype=torch.bfloat16)
        bias = self.bias.data_ptr() if self.bias is not None else None
        held = _rows(residual) if residual is not None else None  # held: a contiguous copy lives through the call
        resid = held.data_ptr() if held is not None else None
        if self.q4 is not None:
            library().bi_linear_i4(
                flat.data_ptr(),
                M,
                self.k,
                self.q4.data_ptr(),
                self.n,
                self.scale4.data_ptr(),
                self.group,
                bias,
                resid,
                out.data_ptr(),
            )
        else:
            library().bi_linear_i8(
                flat.data_ptr(),
                M,
                self.k,
                self.q.data_ptr(),
                self.n,
                self.scale.data_ptr(),
                self.rowsum.data_ptr(),
                bias,
                resid,
                out.data_ptr(),
            )
        return out.view(*x.shape[:-1], self.n)

    def rows(self, n: int) -> "Proj":
        """The first n output rows, as views of this one's storage (no copy)."""
        part = Proj.__new__(Proj)
        part.__dict__.update(self.__dict__)
        part.n = n
        for name in ("bias", "weight", "q", "scale", "rowsum", "q4", "scale4"):
            value = getattr(self, name, None)
            if value is not None:
                setattr(part, name, value[:n])
        return part

    def dequantized(self, ids: torch.Tensor) -> torch.Tensor:
        """The weight's rows `ids` in fp32 (the int8 rows times their scales; the int4 groups times theirs)."""
        if self.q4 is not None:
            return dequantize_i4(self.q4[ids], self.scale4[ids], self.k, self.group)
        if self.q is None:
            return self.weight[ids].float()
        return self.q[ids].float() * self.scale[ids, None]

    def nbytes(self) -> int:
        parts = {
            "bf16": [self.weight, self.bias],
            "int8": [self.q, getattr(self, "scale", None), getattr(self, "rowsum", None), self.bias],
            "int4": [self.q4, getattr(self, "scale4", None), self.bias],
        }[self.precision]
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
