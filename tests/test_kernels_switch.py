"""Command 2 on a machine without the kernels (issue 35.7): scripts/test.sh sets PLAYGROUND_REQUIRE_KERNELS=1, and the
kernel tests raised at collection wherever the kernels could not load (an ARM laptop, an AVX2-only CPU, no compiler).
Now they are required only where the CPU has AVX512-BF16 and a C compiler; elsewhere they skip with the reason.
PLAYGROUND_KERNELS=off reports the kernels unavailable on any machine, for the app and the tests alike, so that
the suite can be run here as it runs there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from playground.env import settings
from playground.core.errors import PlaygroundError

ROOT = Path(__file__).resolve().parents[1]


def run(code_or_args: list[str], **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("PLAYGROUND_KERNELS", "CC")} | env
    return subprocess.run(
        [sys.executable, *code_or_args], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=600
    )


def test_the_switch_reports_the_kernels_unavailable_and_the_app_keeps_torchs_kernels(tiny_models):
    code = f"""
import json, torch
from playground import models
from playground.kernels import model as kernel_model, ops as kernel_ops
from playground.run.spec import Precision
target, _ = models.load_model({str(tiny_models["target"])!r}, precision=Precision.BF16)
draft, _ = models.load_model({str(tiny_models["draft"])!r}, precision=Precision.INT8)
print(json.dumps(dict(why=kernel_ops.why_not(), available=kernel_ops.available(), invariant=kernel_model.is_invariant(target),
                      vnni_draft=hasattr(draft, "_int8_bytes"), dtype=str(target.dtype),
                      default_draft=models.default_draft_precision().value)))
"""
    done = run(["-c", code], PLAYGROUND_KERNELS="off", PLAYGROUND_MODEL_ROOTS=str(tiny_models["target"].parent))
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == dict(
        why="PLAYGROUND_KERNELS=off",
        available=False,
        invariant=False,
        vnni_draft=False,
        dtype="torch.bfloat16",
        default_draft="int8",
    )  # torch's bf16 target and torch's dynamic int8 draft, the default draft precision where int4 cannot run


def test_the_pages_default_draft_label_builds_no_kernels(tmp_path):
    """The draft precision dropdown names the default (int4 where the kernels run, else int8) when the page is built,
    without building the kernels (kernels.build.expected): with a compiler and an empty cache it says int4 where the
    CPU runs a variant, and nothing was built; with no compiler it says int8, as the load's default then does."""
    from tests.kernel_support import expected_here

    code = """
import json, sys
from playground import models
from playground.kernels import build
seen = dict(label=models.default_draft_precision(build=False).value, built=sorted(build._libs))
if sys.argv[1:] == ["load"]:
    seen["default"] = models.default_draft_precision().value
print(json.dumps(seen))
"""
    empty = tmp_path / "bin"
    empty.mkdir()
    compiler = run(["-c", code], PLAYGROUND_CACHE=str(tmp_path / "cache"))
    bare = run(["-c", code, "load"], PLAYGROUND_CACHE=str(tmp_path / "cache-bare"), PATH=str(empty))
    for done in (compiler, bare):
        assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(compiler.stdout.strip().splitlines()[-1]) == dict(
        label="int4" if expected_here() else "int8", built=[]
    )
    assert json.loads(bare.stdout.strip().splitlines()[-1]) == dict(label="int8", built=[], default="int8")


def test_the_kernel_tests_skip_with_the_reason_when_switched_off_even_where_required():
    done = run(
        ["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/test_kernels.py", "tests/test_exactness.py"],
        PLAYGROUND_KERNELS="off",
        PLAYGROUND_REQUIRE_KERNELS="1",
    )
    assert done.returncode in (0, 5), done.stdout[-2000:] + done.stderr[-2000:]  # 5: every module skipped whole
    assert "2 skipped" in done.stdout and "passed" not in done.stdout, done.stdout[-2000:]
    assert "batch-invariant kernels unavailable: PLAYGROUND_KERNELS=off" in done.stdout


def test_without_a_compiler_the_kernel_tests_skip_even_where_required(tmp_path):
    """A machine with no C compiler (nor a library built before) cannot build the kernels: under
    PLAYGROUND_REQUIRE_KERNELS=1 the kernel tests used to raise at collection, failing command 2."""
    empty = tmp_path / "bin"
    empty.mkdir()
    done = run(
        ["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/test_kernels.py"],
        PLAYGROUND_REQUIRE_KERNELS="1",
        PLAYGROUND_CACHE=str(tmp_path / "cache"),
        PATH=str(empty),
    )
    assert done.returncode in (0, 5), done.stdout[-2000:] + done.stderr[-2000:]  # 5: the module skipped whole
    assert "1 skipped" in done.stdout and "no C compiler" in done.stdout, done.stdout[-2000:]


def test_the_switch_is_read_and_checked():
    assert settings.read({}).kernels == "auto" and settings.read({"PLAYGROUND_KERNELS": "OFF"}).kernels == "off"
    assert settings.read({"PLAYGROUND_KERNELS": "AVX2"}).kernels == "avx2"
    with pytest.raises(
        PlaygroundError, match="PLAYGROUND_KERNELS must be one of auto, amx, avx512, avx2, portable, off"
    ):
        settings.read({"PLAYGROUND_KERNELS": "maybe"})


@pytest.mark.parametrize("name", ["avx2", "portable"])
def test_a_forced_variant_runs_the_app_on_it_and_the_start_up_line_says_so(tiny_models, name):
    """PLAYGROUND_KERNELS=<variant> makes a loaded bf16 target run that variant (where the CPU can), and the
    line the start-up shows names it; the same model then decodes the same tokens as HF generate on it."""
    from playground.kernels import ops as kernel_ops

    if kernel_ops.unsupported(name):
        pytest.skip(f"the {name} kernels cannot run on this CPU: {kernel_ops.unsupported(name)}")
    code = f"""
import json, torch
from playground import models
from playground.kernels import model as kernel_model, ops as kernel_ops
from playground.run.spec import Precision
target, tok = models.load_model({str(tiny_models["target"])!r}, precision=Precision.BF16)
ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
with torch.inference_mode():
    out = target.generate(ids, do_sample=False, max_new_tokens=12, pad_token_id=0)
print(json.dumps(dict(variant=kernel_ops.variant(), line=kernel_ops.describe(), invariant=kernel_model.is_invariant(target),
                      tokens=out[0, 6:].tolist())))
"""
    done = run(["-c", code], PLAYGROUND_KERNELS=name, PLAYGROUND_MODEL_ROOTS=str(tiny_models["target"].parent))
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["variant"] == name and seen["invariant"] and len(seen["tokens"]) == 12
    assert seen["line"].startswith(f"CPU kernels: batch-invariant {name}, forced by PLAYGROUND_KERNELS")


def test_a_variant_the_cpu_lacks_is_refused_with_the_reason(monkeypatch):
    from playground.kernels import build, ops as kernel_ops

    monkeypatch.setattr(build, "cpu_flags", lambda: {"sse2"})  # an x86-64 CPU older than AVX2
    assert kernel_ops.unsupported("avx2") == "this CPU lacks avx2, fma, f16c"
    assert kernel_ops.unsupported("avx512").startswith("this CPU lacks avx512f")
    monkeypatch.setenv("PLAYGROUND_KERNELS", "avx2")
    assert kernel_ops.cpu_supported() == "PLAYGROUND_KERNELS=avx2, but this CPU lacks avx2, fma, f16c"


def test_auto_picks_amx_on_an_amx_cpu_where_its_start_up_check_passes_else_says_why(monkeypatch):
    """On a CPU with AMX auto tries amx first: it runs where Linux grants the tiles and bi_kernel_check finds them
    computing their exact model (an AMX CPU), else auto goes on to avx512 and the start-up line says why not amx
    (here: a CPU without AMX, its flags faked, whose Linux refuses the tiles)."""
    from playground.kernels import build, ops as kernel_ops

    real = build.cpu_flags()
    flags = set(build.VARIANTS[0].needs) | {"avx2", "fma", "f16c"}  # an Intel Xeon with AMX
    monkeypatch.setattr(build, "cpu_flags", lambda: flags)
    if kernel_ops.unsupported("amx") or not set(build.AVX512_NEEDS) <= real:
        pytest.skip("not an x86-64 CPU with AVX512-BF16")
    monkeypatch.delenv("PLAYGROUND_KERNELS", raising=False)
    monkeypatch.setattr(build, "_libs", {})
    monkeypatch.setattr(build, "_active", [])
    assert kernel_ops.runnable()[:2] == ["amx", "avx512"]
    if "amx_bf16" in real:
        assert kernel_ops.variant() == "amx"
        assert kernel_ops.describe() == "CPU kernels: batch-invariant amx, the best this CPU runs"
    else:
        assert kernel_ops.variant() == "avx512"
        assert "; not amx: the Linux kernel did not grant this process the AMX tiles" in kernel_ops.describe()
