"""The lean draft step on two (or more) kernel sources in one process, step by step interleaved (issue 43).

    flock /tmp/cpu.lock python scripts/kernels_ab.py int4 200 /path/to/old/kernels playground/kernels

Each argument after the precision and the step count is a folder of kernel sources (avx512.c and what it
includes); each is built into the kernel cache like build.py builds it and takes its turn on the same model and
cache, one step each. Prints the median, first quartile and minimum per source, and whether their logits agree
bitwise (they must: a change to a kernel's speed must not change a bit). The machine's load drifts: steps
interleaved see the same drift, runs one after the other do not.
"""

from __future__ import annotations

import ctypes
import hashlib
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from playground.core.config import Precision  # noqa: E402
from playground.kernels import build, step as lean_step  # noqa: E402
from playground.kernels.step import LeanForward  # noqa: E402
from playground.models.load import load_model  # noqa: E402


def library_of(folder: str) -> ctypes.CDLL:
    """The avx512 library built from the sources in folder (cached like build.py caches the kernels)."""
    variant = build.BY_NAME["avx512"]
    sources = b"".join(p.read_bytes() for p in sorted(Path(folder).glob("*.c")))
    digest = hashlib.sha256(sources + " ".join([*build.COMMON, *variant.flags]).encode()).hexdigest()[:16]
    path = build.settings.read().cache / "kernels" / f"avx512-{digest}" / "libavx512.so"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        command = ["gcc", *build.COMMON, *variant.flags, str(Path(folder) / "avx512.c"), "-o", str(path)]
        subprocess.run(command, check=True)
    lib = ctypes.CDLL(str(path))
    lib.bi_model_step.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    lib.bi_model_step.argtypes += [ctypes.c_void_p] * 2 + [ctypes.c_int64] + [ctypes.c_void_p] * 2
    lib.bi_model_step.restype = ctypes.c_int
    return lib


@torch.inference_mode()
def main() -> None:
    precision, steps, folders = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    libs = [library_of(f) for f in folders]
    model, _ = load_model("pack:qwen2.5-coder-0.5b-instruct", precision=Precision(precision))
    torch.manual_seed(0)
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (1, 200))
    tokens = [torch.randint(0, vocab, (1, 1)) for _ in range(steps)]
    lean = LeanForward(model)
    lean(prompt)
    times: list[list[float]] = [[] for _ in libs]
    same = True
    for n, token in enumerate(tokens):
        outs = []
        for i, lib in enumerate(libs):
            lean_step.library = lambda lib=lib: lib  # the step's one call goes to this source's build
            start = time.perf_counter()
            outs.append(lean(token))
            lean.crop(200)
            if n >= 10:  # warm-up
                times[i].append(time.perf_counter() - start)
        same &= all(torch.equal(outs[0], o) for o in outs)
    for folder, t in zip(folders, times):
        t.sort()
        print(
            f"{precision} {folder}: median {statistics.median(t) * 1e3:.2f} ms, q1 {t[len(t) // 4] * 1e3:.2f}, min {t[0] * 1e3:.2f}"
        )
    print("logits bitwise the same across the sources:", same)


if __name__ == "__main__":
    main()
