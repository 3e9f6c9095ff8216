"""amx.c on any CPU with AVX512-BF16: the arithmetic of the tiles against 240 cases recorded on real AMX tiles
(tests/data/amx/, its README says how), and the amx variant's code around them (scripts/amx_check.c built with
AMX_EMULATE, the tiles computed in plain C by their exact model). On an AMX CPU the same tests run the real tiles.
tests/test_kernels.py, test_step.py and test_exactness.py run the amx_emulated variant as one more variant."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from playground.kernels import build

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "data" / "amx" / "amx_tdpbf16ps_cases.bin"


def _compiler() -> str:
    avx512 = build.unsupported("avx512")
    if avx512:  # the emulation runs avx512.c's code around the tiles
        pytest.skip(f"the emulated amx kernels need the avx512 variant's CPU: {avx512}")
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not compiler:
        pytest.skip("no C compiler")
    return compiler


def recorded_cases() -> list[tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]]:
    """Per case: C0 (16 x 16 fp32) and its chunks (A, B as uint16 16 x 32, C after the instruction)."""
    data = CASES.read_bytes()
    magic, cases, chunks = data[:4], *struct.unpack_from("<II", data, 4)
    assert magic == b"AMXT" and (cases, chunks) == (240, 4)
    off, out = 12, []

    def take(dtype, n: int, shape) -> np.ndarray:
        nonlocal off
        a = np.frombuffer(data, dtype=dtype, count=n, offset=off).reshape(shape).copy()
        off += n * np.dtype(dtype).itemsize
        return a

    for _ in range(cases):
        c0 = take("<f4", 256, (16, 16))
        out.append(
            (
                c0,
                [
                    (take("<u2", 512, (16, 32)), take("<u2", 512, (16, 32)), take("<f4", 256, (16, 16)))
                    for _ in range(chunks)
                ],
            )
        )
    assert off == len(data)
    return out


def _mismatches(dp, cases) -> dict[int, int]:
    """Accumulators whose bits differ from the real tiles', per kind of case (case index mod 4)."""
    bad = {kind: 0 for kind in range(4)}
    for i, (c0, chunks) in enumerate(cases):
        c = c0.copy()
        for a, b, want in chunks:
            dp(c.ctypes.data, a.ctypes.data, b.ctypes.data)
            bad[i % 4] += int(np.count_nonzero(c.view("<u4") != want.view("<u4")))
            c = want.copy()  # each chunk from the real tiles' C: one instruction at a time
    return bad


@pytest.mark.parametrize("fn", ["bi_tile_dp", "bi_tile_dp_vec", "bi_tile_dp_exact"])
def test_the_tiles_arithmetic_reproduces_every_recorded_case_of_real_amx_tiles(fn):
    """bi_tile_dp: one tdpbf16ps (amx_emulated: tile_dp_lanes; on an AMX CPU the amx variant's real tiles too);
    bi_tile_dp_vec: the one-row kernel's AVX512 lanes; bi_tile_dp_exact: the model element by element (the start-up
    check's reference). 245,760 accumulators, every bit."""
    _compiler()
    names = ["amx_emulated"] + (["amx"] if build.load("amx") is not None else [])
    cases = recorded_cases()
    for name in names:
        lib = build.load(name)
        assert lib is not None, build.reason(name)
        assert _mismatches(getattr(lib, fn), cases) == {0: 0, 1: 0, 2: 0, 3: 0}, name


def test_the_amx_linear_is_right_and_batch_invariant_with_emulated_tiles(tmp_path):
    compiler = _compiler()
    exe = tmp_path / "amx_check"
    flags = [*build.COMMON[:2], *build.BY_NAME["amx"].flags, "-DAMX_EMULATE"]
    built = subprocess.run(
        [compiler, *flags, str(ROOT / "scripts" / "amx_check.c"), "-o", str(exe), "-lm"],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode and "amx" in built.stderr:
        pytest.skip(f"this compiler lacks the AMX flags: {built.stderr.strip().splitlines()[-1][:200]}")
    assert built.returncode == 0, built.stderr[-2000:]
    done = subprocess.run(
        [str(exe), "quick"],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    )
    assert done.returncode == 0 and done.stdout.rstrip().endswith("all ok"), done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.count(": ok (") == 28, done.stdout[-3000:]  # every shape ran


def test_the_tiles_order_on_avx512_lanes_is_the_emulated_tiles_bitwise_in_passes_of_every_size():
    """avx512_tiles runs every pass on the one-row kernel's lanes (register blocks of 1 to 4 rows, cache blocks of
    128): each row equals amx_emulated's (its tiles for 2 rows or more), bitwise, with partial chunks of K and
    partial blocks of weight rows, a bias and a residual."""
    import torch

    from playground.kernels import ops

    _compiler()
    g = torch.Generator().manual_seed(3)
    w, b = (torch.randn(37, 80, generator=g) * 0.1).bfloat16(), torch.randn(37, generator=g).bfloat16()
    x, r = torch.randn(300, 80, generator=g).bfloat16(), torch.randn(300, 37, generator=g).bfloat16()
    previous = ops.use("amx_emulated")
    try:
        tiles = ops.linear(x, w, b, r)
        ops.use("avx512_tiles")
        for m in (*range(1, 10), 41, 129, 300):
            assert torch.equal(ops.linear(x[:m], w, b, r[:m]), tiles[:m]), m
    finally:
        ops.use(previous)


def _cancelling_qwen2():
    """A tiny Qwen2 whose linears' inputs span 2^-12..2^12 with alternating signs, so that sums cancel and the
    order of accumulation shows in the bf16 results (with plain random weights avx512's and the tiles' orders
    round alike here)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(5)
    config = Qwen2Config(
        vocab_size=300,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        initializer_range=0.3,
    )
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for lin in [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m.in_features < 300]:
            k = torch.arange(lin.in_features)
            lin.weight *= (2.0 ** (12 * ((k // 5) % 3) - 12)) * (1 - 2 * (k % 2))
    return model.to(torch.bfloat16)


def test_the_amx_builds_one_call_forward_runs_its_own_linear_bitwise_as_its_module_path():
    """Issue 53: step.c's bi_model_step linked avx512.c's linear in the amx build, so the target's lean path never
    reached the tiles. On amx_emulated the one-call forward (a 9-token pass on the tiles, then one-token steps on the
    lanes) must equal the module path bit for bit, on a model where avx512's order gives other logits."""
    import torch
    from transformers import DynamicCache

    from playground.kernels import model as kernel_model, ops
    from playground.kernels.step import LeanForward

    _compiler()
    model = _cancelling_qwen2()
    assert kernel_model.make_invariant(model)
    feeds = [torch.randint(0, 300, (1, n), generator=torch.Generator().manual_seed(n)) for n in (9, 1, 1, 1)]
    previous = ops.use("avx512")
    try:
        with torch.inference_mode():
            other = model(input_ids=feeds[0]).logits[0, -1]
            ops.use("amx_emulated")
            assert not torch.equal(model(input_ids=feeds[0]).logits[0, -1], other)  # the test can tell the orders
            lean, cache = LeanForward(model, capacity=16), DynamicCache()
            for i, feed in enumerate(feeds):
                theirs = model(input_ids=feed, cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1]
                assert torch.equal(lean(feed), theirs), i
    finally:
        ops.use(previous)
