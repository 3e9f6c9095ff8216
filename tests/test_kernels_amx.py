"""amx.c's bf16 linear on a CPU without AMX: scripts/amx_check.c built with AMX_EMULATE (the tile instructions
written out in plain C, as the SDM's pseudo-code of tdpbf16ps) checks everything around the tiles: the inputs
packed in VNNI pairs, the blocks of weight and input rows, the zero padding of N and K, the transposed epilogue.
Against an fp64 reference to bf16 precision, bitwise against the one-element definition (bi_linear_ref), and every
row alone and every prefix of rows bitwise against the rows together. The tiles themselves run only on an AMX CPU,
where tests/test_kernels.py runs the amx variant."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from playground.kernels import build

ROOT = Path(__file__).resolve().parents[1]


def test_the_amx_linear_is_right_and_batch_invariant_with_emulated_tiles(tmp_path):
    avx512 = build.unsupported("avx512")
    if avx512:  # the emulation runs avx512.c's code around the tiles
        pytest.skip(f"the emulated amx linear needs the avx512 variant's CPU: {avx512}")
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not compiler:
        pytest.skip("no C compiler")
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
