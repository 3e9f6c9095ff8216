"""Times the bf16 linears of one Qwen2.5-1.5B layer (random weights of the real shapes) through each kernel variant
and torch's F.linear, for M = 1, 9, 2000 rows. THREADS (default 2) sets both torch's and OpenMP's threads."""

import os
import statistics
import sys
import time

THREADS = int(os.environ.get("THREADS", "2"))
os.environ["OMP_NUM_THREADS"] = str(THREADS)
import torch

torch.set_num_threads(THREADS)
sys.path.insert(0, os.getcwd())
from playground.kernels import build, ops

SHAPES = {
    "qkv": (2048, 1536, True),
    "o": (1536, 1536, False),
    "gate_up": (17920, 1536, False),
    "down": (1536, 8960, False),
}
COPIES = 4  # layers' worth of weights cycled, so a one-row pass streams them from memory, not L3
g = torch.Generator().manual_seed(0)
W = [
    {k: (torch.randn(n, kk, generator=g) * 0.02).bfloat16() for k, (n, kk, _) in SHAPES.items()} for _ in range(COPIES)
]
B = {k: (torch.randn(n, generator=g) * 0.02).bfloat16() for k, (n, _, b) in SHAPES.items() if b}
variants = [v for v in ("amx", "avx512") if build.load(v) is not None]
print("threads", THREADS, "variants", variants, "cpu", build.describe(), flush=True)


def run(impl, x, name, i):
    w, b = W[i % COPIES][name], B.get(name)
    if impl == "torch":
        return torch.nn.functional.linear(x, w, b)
    build.use(impl)
    return ops.linear(x, w, b)


def layer_time(impl, M, reps):
    xs = {k: (torch.randn(M, kk, generator=g)).bfloat16() for k, (n, kk, _) in SHAPES.items()}
    for k in SHAPES:
        run(impl, xs[k], k, 0)  # warm-up (and the build)
    per = {k: [] for k in SHAPES}
    for r in range(reps):
        for k in SHAPES:
            t = time.perf_counter()
            run(impl, xs[k], k, r + 1)
            per[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in per.items()}


x = torch.randn(37, 1536, generator=g).bfloat16()
want = torch.nn.functional.linear(x.float(), W[0]["qkv"].float(), B["qkv"].float())
for impl in [*variants, "torch"]:
    got = run(impl, x, "qkv", 0).float()
    print(f"{impl}: max |err| vs fp32 {float((got - want).abs().max()):.3e} (|ref| max {float(want.abs().max()):.2f})")
results = {}
ROWS = [int(m) for m in os.environ.get("ROWS", "1,9,2000").split(",")]
for M, reps in ((m, 3 if m > 100 else 40) for m in ROWS):
    for impl in [*variants, "torch"]:
        t = layer_time(impl, M, reps)
        results[(impl, M)] = sum(t.values())
        detail = " ".join(f"{k} {v * 1e3:.2f}" for k, v in t.items())
        print(
            f"M={M:<5} {impl:<7} layer {sum(t.values()) * 1e3:8.2f} ms  28 layers {28 * sum(t.values()):7.3f} s  ({detail} ms)",
            flush=True,
        )
for impl in [*variants, "torch"] if ROWS == [1, 9, 2000] else []:
    print(
        f"{impl}: V(9)/V(1) of the linears {results[(impl, 9)] / results[(impl, 1)]:.3f}; "
        f"M=2000 28 layers {28 * results[(impl, 2000)]:.2f} s ({results[(impl, 2000)] / results[('torch', 2000)]:.2f}x torch)"
    )
