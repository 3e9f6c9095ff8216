"""The kernel variants against each other on the default pair's bf16 target:
`python -m playground.bench --kernel-variants [--variant-prefill 2000] [--variant-reps 5]`.

For every variant this CPU runs (playground/kernels/ops.VARIANTS), on the same model object:
- V(1): one token on a cache of 128 (the target alone's step, the memory-bound case), median of many steps;
- V(9)/V(1): a verification pass of 9 tokens against the one-token step;
- prefill: one pass over --variant-prefill tokens (the first token's cost on a long prompt).
The variants take turns pass by pass for V(n) and in rotated order for the prefill, so they share whatever load
the machine has; every figure is a median over all the passes, and the ratios to the first variant are of those
medians. Reported, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import DynamicCache

from playground.engine.cache import crop_cache
from playground.kernels import ops as kernel_ops
from playground.core.progress import Progress, quiet


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kernel-variants",
        action="store_true",
        help="time the one-token step, V(9)/V(1) and a long prefill on every kernel variant this CPU runs "
        "(bench/variants.py)",
    )
    p.add_argument("--variant-prefill", type=int, default=2000, help="prompt tokens of the prefill timing")
    p.add_argument("--variant-reps", type=int, default=3, help="repeats per variant (medians)")
    p.add_argument("--variants", nargs="+", help="only these variants (default: every one this CPU runs)")


@torch.inference_mode()
def _pass(model, ids: torch.Tensor, cache: DynamicCache | None = None) -> float:
    start = time.perf_counter()
    model(input_ids=ids, cache=cache, use_cache=cache is not None)
    return time.perf_counter() - start


@torch.inference_mode()
def _steps(model, names: list[str], context: torch.Tensor, width: int, n: int) -> dict[str, list[float]]:
    """n passes of `width` tokens on each variant, the variants taking turns pass by pass (so a change in the
    machine's load falls on all of them), each pass on the context's cache cut back to the context."""
    cache = DynamicCache(config=model.config)
    model(input_ids=context, cache=cache)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(n):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            kernel_ops.use(name)
            crop_cache(cache, context.shape[1])
            times[name].append(_pass(model, torch.full((1, width), 100 + i), cache))
    return times


def measure(
    model, names: list[str], prefill: int, reps: int, progress: Progress = quiet
) -> dict[str, dict[str, float]]:
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    context = torch.randint(0, vocab, (1, 128), generator=g)
    long = torch.randint(0, vocab, (1, prefill), generator=g)
    seen: dict[str, dict[str, list[float]]] = {n: {"v1": [], "v9": [], "prefill": []} for n in names}
    previous = kernel_ops.variant()
    try:
        _steps(model, names, context, 1, 2 * len(names))  # warm: each library's first calls, the caches
        for rep in range(reps):
            for width, key, n in ((1, "v1", 12), (9, "v9", 6)):
                for name, times in _steps(model, names, context, width, n * len(names)).items():
                    seen[name][key] += times
            for name in names[rep % len(names) :] + names[: rep % len(names)] if prefill else []:
                kernel_ops.use(name)
                seen[name]["prefill"].append(_pass(model, long))
            progress(f"repeat {rep + 1}/{reps}", (rep + 1) / reps)
    finally:
        kernel_ops.use(previous)
    out = {}
    for name, s in seen.items():
        v1, v9 = statistics.median(s["v1"]), statistics.median(s["v9"])
        out[name] = {"v1_ms": v1 * 1e3, "v9_over_v1": v9 / v1}
        if s["prefill"]:
            out[name]["prefill_s"] = statistics.median(s["prefill"])
    return out


def markdown(results: dict[str, dict[str, float]], prefill: int) -> str:
    best = next(iter(results))
    lines = [
        f"| variant | V(1) ms | vs {best} | V(9)/V(1) | prefill {prefill} tokens, s | vs {best} |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results.items():
        p, p0 = r.get("prefill_s"), results[best].get("prefill_s")
        prefill_cells = f"{p:.2f} | {p / p0:.2f}x" if p and p0 else "– | –"
        lines.append(
            f"| {name} | {r['v1_ms']:.1f} | {r['v1_ms'] / results[best]['v1_ms']:.2f}x | {r['v9_over_v1']:.2f} | "
            f"{prefill_cells} |"
        )
    return "\n".join(lines)


def main(args: argparse.Namespace, target: str, progress: Progress) -> int:
    """Load the bf16 target once (on the kernels) and time each variant on it."""
    import platform

    from playground.models.load import load_model

    names = args.variants or kernel_ops.runnable()
    for name in names:
        if kernel_ops.load(name) is None:
            raise SystemExit(f"The {name} kernels cannot run here: {kernel_ops.reason(name)}")
    model, _ = load_model(target, precision="bf16")
    results = measure(model, names, args.variant_prefill, args.variant_reps, progress)
    from playground.bench.machine import cpu_name

    print(f"{cpu_name()} ({platform.machine()}), {torch.get_num_threads()} threads")
    print(markdown(results, args.variant_prefill))
    return 0
