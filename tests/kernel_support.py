"""When the tests of the batch-invariant kernels run, skip or fail. Some kernel variant runs on any CPU with a C
compiler (playground/kernels/build.py: amx, avx512, avx2, portable; amx_emulated where avx512 runs). PLAYGROUND_REQUIRE_KERNELS=1 (scripts/test.sh) turns
kernels that did not load into a failure where they should have; elsewhere (no compiler, PLAYGROUND_KERNELS=off) the
tests skip, saying why, and everything else runs on torch's kernels. kernel_variant runs a test on each variant."""

from __future__ import annotations

import os
import shutil

import pytest

from playground.kernels import build, ops as kernel_ops


def expected_here() -> bool:
    """Whether this machine should run the kernels: a CPU that has them, a C compiler, the switch not off."""
    return kernel_ops.cpu_supported() is None and bool(
        os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    )


def require_kernels() -> None:
    """At a test module's top: go on where the kernels run; fail where they should but did not (under
    PLAYGROUND_REQUIRE_KERNELS=1); else skip the module with the reason."""
    why = kernel_ops.why_not()
    if why is None:
        return
    if os.environ.get("PLAYGROUND_REQUIRE_KERNELS") == "1" and expected_here():
        raise RuntimeError(
            f"PLAYGROUND_REQUIRE_KERNELS=1 and this machine has what the kernels need, but they did not load: {why}"
        )
    pytest.skip(f"batch-invariant kernels unavailable: {why}", allow_module_level=True)


def _variant_param(name: str):
    why = kernel_ops.unsupported(name)
    marks = [pytest.mark.skip(reason=f"the {name} kernels cannot run on this CPU: {why}")] if why else []
    return pytest.param(name, marks=marks, id=name)


@pytest.fixture(params=[_variant_param(v.name) for v in build.TESTED])
def kernel_variant(request):
    """Every kernel variant (playground/kernels/build.TESTED: ops.VARIANTS and amx_emulated, the amx variant's code
    with its tiles computed exactly in plain C) in turn: the ops run it for the test's duration.
    A variant this CPU cannot execute skips with the reason; one it can execute must load (under
    PLAYGROUND_REQUIRE_KERNELS=1, where a compiler is there), else the test skips with the reason."""
    name = request.param
    if kernel_ops.load(name) is None:
        why = kernel_ops.reason(name)
        if os.environ.get("PLAYGROUND_REQUIRE_KERNELS") == "1" and expected_here():
            raise RuntimeError(f"PLAYGROUND_REQUIRE_KERNELS=1 and this CPU runs the {name} kernels, but: {why}")
        pytest.skip(f"the {name} kernels did not load: {why}")
    previous = kernel_ops.use(name)
    try:
        yield name
    finally:
        kernel_ops.use(previous)
