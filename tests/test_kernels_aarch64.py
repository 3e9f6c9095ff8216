"""portable.c as aarch64 code, the variant an aarch64 host runs: scripts/arm_check.c built for aarch64 with
build.py's portable flags and run under qemu-aarch64 on an x86-64 host (scripts/install.sh --dev installs
gcc-aarch64-linux-gnu and qemu-user), natively on an aarch64 host. It checks every kernel's batch invariance bitwise
(each row alone against passes of 1 to 130 rows, at 1 and 2 OpenMP threads; attention per query and masked against
packed; the whole forward fed at once, token by token and in chunks) and its error against fp64. Then the same
harness built for this x86-64 CPU: the two builds' outputs compared, bitwise. And what the start-up line says on an
aarch64 CPU (a faked platform): the portable kernels, and why."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from playground.kernels import build

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "scripts" / "arm_check.c"
SYSROOT = "/usr/aarch64-linux-gnu"  # Debian's libc (and libgomp) for the target, with the cross compiler
FLAGS = [*build.COMMON[:2], *build.BY_NAME["portable"].flags]  # -O3 -fopenmp and the portable variant's
CHECKS = 36  # the harness's checks (18) at 1 and 2 threads


def _aarch64_toolchain() -> tuple[str, list[str]] | str:
    """(the compiler, the runner's prefix) of an aarch64 build, or why there is none here."""
    if platform.machine().lower() in ("aarch64", "arm64"):
        compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
        return (compiler, []) if compiler else "no C compiler"
    cross, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if not (cross and qemu and Path(SYSROOT).is_dir()):
        return (
            "no aarch64 cross compiler and qemu (aarch64-linux-gnu-gcc, qemu-aarch64 and "
            f"{SYSROOT}: Debian's gcc-aarch64-linux-gnu and qemu-user, which scripts/install.sh --dev installs)"
        )
    return cross, [qemu, "-L", SYSROOT]


def _run_harness(compiler: str, prefix: list[str], flags: list[str], out: Path) -> tuple[str, dict[str, str]]:
    """Build scripts/arm_check.c, run its quick checks: (its output, {check: digest of its outputs})."""
    exe = out.with_suffix("")
    command = [compiler, *flags, str(HARNESS), "-o", str(exe), "-lm"]
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    done = subprocess.run(
        [*prefix, str(exe), "quick", str(out)], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0 and done.stdout.rstrip().endswith("all ok"), done.stdout[-4000:] + done.stderr[-2000:]
    assert done.stdout.count(" ok (") == CHECKS, done.stdout[-4000:]  # every check ran
    digests = dict(line.rsplit(" ", 1) for line in out.read_text().splitlines())
    return done.stdout, digests


@pytest.fixture(scope="module")
def aarch64_run(tmp_path_factory):
    toolchain = _aarch64_toolchain()
    if isinstance(toolchain, str):
        pytest.skip(toolchain)
    compiler, prefix = toolchain
    return _run_harness(compiler, prefix, FLAGS, tmp_path_factory.mktemp("arm") / "arm_check.txt")


def test_portable_kernels_built_for_aarch64_are_batch_invariant_and_right(aarch64_run):
    stdout, digests = aarch64_run
    assert stdout.startswith("an aarch64 build, MADD is fmaf")
    assert len(digests) == CHECKS // 2 and "linear int4 N=29 K=96 resid" in digests


# The kernels whose every operation is exact or correctly rounded IEEE fp32 in the same order on both CPUs: their bits
# cannot depend on the CPU. exp_clamped (attention, SiLU, the forward) calls MADD, a fused multiply-add on aarch64
# and on x86-64 with FMA, but a multiply and an add in the portable build for x86-64 (no -mfma): there the bits may
# differ (where a last fp32 bit survives the rounding to bf16).
NO_EXP = ("linear ", "rmsnorm", "rotary")


def test_aarch64_and_x86_64_builds_compute_the_same_bits(aarch64_run, tmp_path):
    """The same harness built for this CPU: the portable variant as build.py builds it for x86-64, and the avx2
    variant (its own AVX2 linears, portable.c's rest, FMA), where this CPU runs it."""
    if not build.x86():
        pytest.skip(f"this CPU is {platform.machine()}: no x86-64 build to compare with")
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not compiler:
        pytest.skip("no C compiler")
    _, arm = aarch64_run
    _, portable = _run_harness(compiler, [], FLAGS, tmp_path / "portable.txt")
    differ = sorted(name for name in arm if arm[name] != portable[name])
    assert not [name for name in differ if name.startswith(NO_EXP)], differ
    if build.unsupported("avx2"):
        return
    avx2 = [*FLAGS, *build.BY_NAME["avx2"].flags, '-DKERNELS="../playground/kernels/avx2.c"']
    _, theirs = _run_harness(compiler, [], avx2, tmp_path / "avx2.txt")
    assert theirs == arm  # the same sequence of operations, MADD fused on both


@pytest.fixture
def aarch64_cpu(monkeypatch):
    """This process as on an aarch64 CPU: platform.machine() says so, /proc/cpuinfo has no x86 flags, and no
    variant has been chosen or built yet."""
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(build, "cpu_flags", set)  # aarch64's /proc/cpuinfo lists Features, no flags line
    monkeypatch.setattr(build, "_libs", {})
    monkeypatch.setattr(build, "_active", [])
    monkeypatch.delenv("PLAYGROUND_KERNELS", raising=False)


def test_on_aarch64_the_portable_kernels_run_and_the_start_up_line_says_why(aarch64_cpu):
    from playground.kernels import ops as kernel_ops

    for name in ("amx", "avx512", "avx2"):
        assert kernel_ops.unsupported(name) == f"the {name} kernels are x86-64 code; this CPU is aarch64"
    assert kernel_ops.runnable() == ["portable"] and kernel_ops.cpu_supported() is None
    if kernel_ops.load("portable") is None:  # no C compiler here: the line says so (the next test)
        pytest.skip(f"the portable kernels did not build here: {kernel_ops.reason('portable')}")
    assert kernel_ops.variant() == "portable" and kernel_ops.why_not() is None
    assert kernel_ops.describe() == (
        "CPU kernels: batch-invariant portable, the best this CPU runs "
        "(amx, avx512 and avx2 are x86-64 code; this CPU is aarch64)"
    )


def test_on_aarch64_without_a_compiler_torchs_kernels_run_and_the_line_says_why(aarch64_cpu, monkeypatch, tmp_path):
    from playground.kernels import ops as kernel_ops

    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))  # no library built before
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert kernel_ops.variant() is None
    assert kernel_ops.why_not() == "no C compiler (gcc) to build the kernels"
    assert kernel_ops.describe() == (
        "CPU kernels: torch's (no batch-invariant kernels: no C compiler (gcc) to build the kernels)"
    )


def test_on_x86_64_the_line_gives_no_reason_for_a_faster_variant_that_runs(monkeypatch):
    """Where the tests made a slower variant run (ops.use), the faster ones load: no reason to name."""
    from playground.kernels import ops as kernel_ops

    monkeypatch.delenv("PLAYGROUND_KERNELS", raising=False)
    if kernel_ops.load("portable") is None:
        pytest.skip(f"the portable kernels did not build here: {kernel_ops.reason('portable')}")
    previous = kernel_ops.use("portable")
    try:
        line = kernel_ops.describe()
    finally:
        kernel_ops.use(previous)
    faster = [v.name for v in build.VARIANTS[:-1] if v.auto and kernel_ops.reason(v.name)]
    assert line.startswith("CPU kernels: batch-invariant portable, the best this CPU runs") and "None" not in line
    assert line.count("; not ") == len(faster)
