"""The kernel variants: one C source per instruction set, each built once into the cache, and the choice of the
variant this CPU runs (PLAYGROUND_KERNELS forces one). playground/kernels/ops.py calls the chosen library."""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from playground.env import settings

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
    auto: bool = True  # False: never chosen by auto


# The first variant this CPU runs is the one chosen (PLAYGROUND_KERNELS=auto); PLAYGROUND_KERNELS=<name> forces one.
# avx2 and avx512 include portable.c and replace its hot kernels; amx includes avx512.c (its linear in the tiles'
# arithmetic, everything else avx512's). The library hash covers every source. amx loads only where its start-up check passes (bi_kernel_check: the tiles against their exact model).
AMX_FLAGS = ("-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni", "-mamx-tile", "-mamx-bf16")
AVX512_NEEDS = ("avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni")
VARIANTS = (
    Variant("amx", "amx.c", AMX_FLAGS, (*AVX512_NEEDS, "amx_tile", "amx_bf16")),
    Variant("avx512", "avx512.c", ("-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni"), AVX512_NEEDS),
    Variant("avx2", "avx2.c", ("-mavx2", "-mfma", "-mf16c", "-ffp-contract=off"), ("avx2", "fma", "f16c")),
    Variant("portable", "portable.c", ("-ffp-contract=off", "-Wno-psabi"), x86=False),
)
# Builds of amx.c for a CPU without AMX, never chosen by auto nor by PLAYGROUND_KERNELS: amx_emulated computes the
# tiles exactly in plain C (the tests run the amx variant's code through it); avx512_tiles runs every pass on the
# one-row kernel's AVX512 lanes (the tiles' order on any AVX512-BF16 CPU; bench --kernel-variants times it).
EXTRA = (
    Variant("amx_emulated", "amx.c", (*AMX_FLAGS, "-DAMX_EMULATE"), AVX512_NEEDS, auto=False),
    Variant("avx512_tiles", "amx.c", (*AMX_FLAGS, "-DTILE_ORDER_VECTOR"), AVX512_NEEDS, auto=False),
)
TESTED = (*VARIANTS, EXTRA[0])  # the variants the kernel tests run, each where this CPU executes it
BY_NAME = {v.name: v for v in (*VARIANTS, *EXTRA)}

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


def x86() -> bool:
    """Whether this CPU runs x86-64 code (aarch64 and the others get portable.c)."""
    return platform.machine().lower() in ("x86_64", "amd64")


def unsupported(name: str) -> str | None:
    """None when this CPU can run the variant, else why not."""
    variant = BY_NAME[name]
    if variant.x86 and not x86():
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
    return None if runnable() else "no kernel variant runs on this CPU"


def runnable() -> list[str]:
    """The variants this CPU can execute, best first (auto tries them in this order)."""
    return [v.name for v in VARIANTS if unsupported(v.name) is None]


def _build_dir(variant: Variant) -> Path:
    """The library's folder in the cache, one per variant, sources and flags."""
    sources = b"".join(p.read_bytes() for p in sorted(HERE.glob("*.c")))
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
        compiler = _compiler()
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
    if hasattr(lib, "bi_kernel_ready") and not lib.bi_kernel_ready():
        return "the Linux kernel did not grant this process the AMX tiles (arch_prctl ARCH_REQ_XCOMP_PERM)"
    if hasattr(lib, "bi_kernel_check") and not lib.bi_kernel_check():
        return "the start-up check failed: the tiles did not compute their exact model (tests/data/amx/README.md)"
    for fn in ("bi_tile_dp", "bi_tile_dp_vec", "bi_tile_dp_exact"):
        if hasattr(lib, fn):
            getattr(lib, fn).argtypes = [_ptr, _ptr, _ptr]
    lib.bi_linear.argtypes = [_ptr, _i64, _i64, _ptr, _i64, _ptr, _ptr, _ptr]
    lib.bi_rotary_split.argtypes = [_ptr, _i64, _i64, _i64, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _ptr]
    lib.bi_silu_mul.argtypes = [_ptr, _i64, _i64, _ptr]
    lib.bi_linear_ref.argtypes = lib.bi_linear.argtypes
    lib.bi_attention.argtypes = [*[_ptr] * 9, *[_i64] * 6, ctypes.c_float]
    lib.bi_attention_ref.argtypes = [*lib.bi_attention.argtypes, _ptr]
    lib.bi_linear_i8.argtypes = [_ptr, _i64, _i64, _ptr, _i64, _ptr, _ptr, _ptr, _ptr, _ptr]
    lib.bi_linear_i4.argtypes = [_ptr, _i64, _i64, _ptr, _i64, _ptr, _i64, _ptr, _ptr, _ptr]
    lib.bi_rmsnorm.argtypes = [_ptr, _i64, _i64, _ptr, ctypes.c_float, _ptr]
    lib.read_sum.argtypes = [_ptr, _i64, ctypes.c_int]
    lib.read_sum.restype = ctypes.c_double
    lib.bi_model_step.argtypes = [_ptr, _ptr, _i64, _i64, _ptr, _ptr, _i64, _ptr, _ptr]  # kernels/step.py
    lib.bi_model_step.restype = ctypes.c_int
    return lib


def _choose() -> str | None:
    """The variant PLAYGROUND_KERNELS asks for, or (auto) the first that runs here; None when none does."""
    wanted = settings.read().kernels
    if wanted == "off":
        return None
    for name in [wanted] if wanted != "auto" else [v.name for v in VARIANTS if v.auto]:
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
    names = [wanted] if wanted != "auto" else runnable()
    return "; ".join(f"{n}: {reason(n)}" for n in names) if len(names) > 1 else reason(names[0])


def describe() -> str:
    """One line for the start-up: which kernels run and why."""
    name = variant()
    if name is None:
        return f"CPU kernels: torch's (no batch-invariant kernels: {why_not()})"
    auto = settings.read().kernels == "auto"
    how = "the best this CPU runs" if auto else "forced by PLAYGROUND_KERNELS"
    return f"CPU kernels: batch-invariant {name}, {how}{_passed(name) if auto else ''}"


def _passed(name: str) -> str:
    """Why auto passed over the variants it tries before `name` (on aarch64: the x86-64 ones), for describe()."""
    before = [v.name for v in VARIANTS[: VARIANTS.index(BY_NAME[name])] if v.auto and reason(v.name)]
    if before and not x86() and all(BY_NAME[n].x86 for n in before):
        named = ", ".join(before[:-1]) + " and " + before[-1] if len(before) > 1 else before[0]
        return f" ({named} are x86-64 code; this CPU is {platform.machine()})"
    return "".join(f"; not {n}: {reason(n)}" for n in before)  # none where one that runs was set by use()


def available() -> bool:
    return library() is not None


def expected() -> bool:
    """Whether the kernels run here, answered without building them (the page's label of the default draft
    precision): the answer once a variant is chosen; before, whether this CPU runs one and its library is in the
    cache or a C compiler can build it (a build that then fails is the load's to report)."""
    if _active:  # read without the lock: a build in progress holds it
        return _active[0] is not None
    if cpu_supported():
        return False
    wanted = settings.read().kernels
    name = wanted if wanted != "auto" else runnable()[0]
    return (_build_dir(BY_NAME[name]) / f"lib{name}.so").exists() or _compiler() is not None


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
