"""portable.c is every kernel variant's base (issue 56): avx2.c and avx512.c (and amx.c through it) include it and
replace only their hot kernels, so what they keep of it is one definition. The norms, rotary and SiLU of every variant
with fused multiply-adds (MADD is fmaf: every x86-64 variant but portable, and portable on aarch64) give the same bits,
and the norms and the int8 quantisation of a pass's rows the same bits in every variant, on values of every scale:
subnormals, both zeros. avx512.c's own copies rounded with vcvtneps2bf16, which flushes a float32 below the normal
range to zero; on these inputs they gave other bits than portable.c."""

from __future__ import annotations

import ctypes

import pytest
import torch

from playground.kernels import build, ops as kernel_ops
from tests.kernel_support import require_kernels

require_kernels()

P, I64 = ctypes.c_void_p, ctypes.c_int64


def extreme(*shape: int, seed: int) -> torch.Tensor:
    """bf16 bits (as int16) of normal values times 2^e, e in [-140, 60): subnormal results and inputs, both zeros."""
    g = torch.Generator().manual_seed(seed)
    f = torch.randn(*shape, generator=g) * torch.exp2(torch.randint(-140, 60, shape, generator=g).float())
    f[torch.rand(*shape, generator=g) < 0.05] = -0.0
    return (f.view(torch.int32) >> 16).to(torch.int16)


def _p(t: torch.Tensor) -> P:
    return P(t.data_ptr())


def cold_ops(lib: ctypes.CDLL) -> dict[str, list[torch.Tensor]]:
    """The outputs of the kernels portable.c defines for every variant, on the same extreme inputs."""
    M, D, I, Kp = 23, 1544, 300, 1600
    x, w = extreme(M, D, seed=1), extreme(D, seed=2)
    norm = torch.zeros(M, D, dtype=torch.int16)
    lib.bi_rmsnorm(_p(x), I64(M), I64(D), _p(w), ctypes.c_float(1e-6), _p(norm))
    B, S, H, Hkv, Dh = 1, 9, 4, 2, 64
    qkv, cos, sin = extreme(S, (H + 2 * Hkv) * Dh, seed=3), extreme(S, Dh, seed=4), extreme(S, Dh, seed=5)
    q = torch.zeros(H * S * Dh, dtype=torch.int16)
    k, v = torch.zeros(Hkv * S * Dh, dtype=torch.int16), torch.zeros(Hkv * S * Dh, dtype=torch.int16)
    args = (_p(qkv), I64(B), I64(S), I64(H), I64(Hkv), I64(Dh), _p(cos), _p(sin), _p(q), _p(k), _p(v))
    lib.bi_rotary_split(*args)
    gu, act = extreme(M, 2 * I, seed=6), torch.zeros(M, I, dtype=torch.int16)
    lib.bi_silu_mul(_p(gu), I64(M), I64(I), _p(act))
    xq, sx = torch.zeros(M, Kp, dtype=torch.uint8), torch.zeros(M, dtype=torch.float32)
    lib.bi_quantize_rows(_p(x), I64(M), I64(D), I64(Kp), _p(xq), _p(sx))
    return {"rmsnorm": [norm], "rotary": [q, k, v], "silu": [act], "quantize_rows": [xq, sx.view(torch.int32)]}


def fused(name: str) -> bool:
    """Whether the variant's MADD is a fused multiply-add (portable on x86-64 is built without -mfma)."""
    return name != "portable" or not build.x86()


@pytest.fixture(scope="module")
def outputs() -> dict[str, dict[str, list[torch.Tensor]]]:
    names = [v.name for v in build.TESTED if kernel_ops.unsupported(v.name) is None]
    libs = {name: kernel_ops.load(name) for name in names}
    return {name: cold_ops(lib) for name, lib in libs.items() if lib is not None}


def _differ(a: dict[str, list[torch.Tensor]], b: dict[str, list[torch.Tensor]], ops: tuple[str, ...]) -> list[str]:
    return [op for op in ops if not all(torch.equal(x, y) for x, y in zip(a[op], b[op]))]


def test_the_inputs_reach_below_the_normal_range(outputs):
    """Else the tests below could not tell a flush to zero from portable.c's rounding."""
    norm = outputs.get("portable", next(iter(outputs.values())))["rmsnorm"][0]
    exponent, mantissa = (norm >> 7) & 0xFF, norm & 0x7F
    assert ((exponent == 0) & (mantissa != 0)).sum() > 100


def test_the_norms_and_the_quantisation_are_portables_in_every_variant(outputs):
    if "portable" not in outputs:
        pytest.skip("the portable kernels did not load here")
    for name, out in outputs.items():
        assert not _differ(out, outputs["portable"], ("rmsnorm", "quantize_rows")), name


def test_rotary_and_silu_are_one_definition_in_every_variant_with_fused_multiply_adds(outputs):
    names = [name for name in outputs if fused(name)]
    if len(names) < 2:
        pytest.skip(f"fewer than two variants with fused multiply-adds run here: {names}")
    for name in names[1:]:
        assert not _differ(outputs[name], outputs[names[0]], ("rmsnorm", "rotary", "silu", "quantize_rows")), name
