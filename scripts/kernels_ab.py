"""The lean forward (playground/kernels/step.c's one call per pass) on two (or more) kernel sources in one process,
step by step interleaved (issues 43, 56).

    flock /tmp/cpu.lock python scripts/kernels_ab.py int4 200 /path/to/old/kernels playground/kernels
    python scripts/kernels_ab.py bf16 60 /tmp/old/playground/kernels playground/kernels \\
        --model pack:qwen2.5-coder-1.5b-instruct --prefill 500 --prefill-reps 3

Each argument after the precision and the step count is a folder of kernel sources (the variant's source and what
it includes); each is built into the kernel cache like build.py builds it (--variant, avx512 unless told: amx.c's
builds too) and takes its turn on the same model and cache, one step each. With --prefill N, a prompt of N tokens is
timed too, --prefill-reps times per source, the sources in rotated order. Prints the median, first quartile and
minimum per source, and whether their logits agree bitwise (they must where a change is to speed only; where it
changes bits on purpose, say so). The machine's load drifts: passes interleaved see the same drift, runs one after
the other do not.
"""

from __future__ import annotations

import argparse
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


def library_of(folder: str, name: str) -> ctypes.CDLL:
    """The variant's library built from the sources in folder (cached like build.py caches the kernels)."""
    variant = build.BY_NAME[name]
    sources = b"".join(p.read_bytes() for p in sorted(Path(folder).glob("*.c")))
    digest = hashlib.sha256(sources + " ".join([*build.COMMON, *variant.flags]).encode()).hexdigest()[:16]
    path = build.settings.read().cache / "kernels" / f"{name}-{digest}" / f"lib{name}.so"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        command = ["gcc", *build.COMMON, *variant.flags, str(Path(folder) / variant.source), "-o", str(path)]
        subprocess.run(command, check=True)
    lib = ctypes.CDLL(str(path))
    lib.bi_model_step.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64]
    lib.bi_model_step.argtypes += [ctypes.c_void_p] * 2 + [ctypes.c_int64] + [ctypes.c_void_p] * 2
    lib.bi_model_step.restype = ctypes.c_int
    return lib


def report(what: str, folders: list[str], times: list[list[float]]) -> None:
    for folder, t in zip(folders, times):
        t = sorted(t)
        print(
            f"{what} {folder}: median {statistics.median(t) * 1e3:.2f} ms, q1 {t[len(t) // 4] * 1e3:.2f}, "
            f"min {t[0] * 1e3:.2f} ({len(t)} passes)"
        )


@torch.inference_mode()
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("precision", help="the model's precision: bf16, int8 or int4")
    p.add_argument("steps", type=int, help="one-token steps per source (the first 10 are a warm-up)")
    p.add_argument("folders", nargs="+", help="folders of kernel sources")
    p.add_argument("--model", default="pack:qwen2.5-coder-0.5b-instruct")
    p.add_argument("--variant", default="avx512", choices=[v.name for v in (*build.VARIANTS, *build.EXTRA)])
    p.add_argument("--prefill", type=int, default=0, help="also time a prompt of this many tokens")
    p.add_argument("--prefill-reps", type=int, default=3)
    args = p.parse_args()
    libs = [library_of(f, args.variant) for f in args.folders]
    model, _ = load_model(args.model, precision=Precision(args.precision))
    torch.manual_seed(0)
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (1, 200))
    tokens = [torch.randint(0, vocab, (1, 1)) for _ in range(args.steps)]
    lean = LeanForward(model, capacity=max(512, args.prefill + 8))
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
    report(f"{args.precision} step", args.folders, times)
    if args.prefill:
        long = torch.randint(0, vocab, (1, args.prefill))
        prefill: list[list[float]] = [[] for _ in libs]
        for rep in range(args.prefill_reps):
            order = list(range(len(libs)))
            outs = {}
            for i in order[rep % len(libs) :] + order[: rep % len(libs)]:
                lean_step.library = lambda lib=libs[i]: lib
                lean.reset()
                start = time.perf_counter()
                outs[i] = lean(long)
                prefill[i].append(time.perf_counter() - start)
            same &= all(torch.equal(outs[0], o) for o in outs.values())
        report(f"{args.precision} prefill {args.prefill} tokens", args.folders, prefill)
    print("logits bitwise the same across the sources:", same)


if __name__ == "__main__":
    main()
