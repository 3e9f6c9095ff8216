"""How close the target's step comes to this machine's memory bandwidth.

    python scripts/bandwidth_probe.py [--target pack:qwen2.5-coder-1.5b-instruct] [--steps 24] [--repeats 3]

Measures, in one process:
1. the machine's read bandwidth: the best of a streaming sum over 1 GiB (the kernels library's, every
   thread; torch's sum, one thread and every thread), each the best of 5 passes;
2. the bytes one target step reads: every weight the step touches (linears, norms, the LM head; the
   embedding lookup reads one row);
3. one target step (a 1-token pass on top of a 128-token cache) with torch's stock bf16 kernels and with
   the batch-invariant kernels (playground/kernels/), interleaved, medians over the repeats; and V(n)
   for n = 1, 2, 3, 5, 9, 17 with each;
4. where the invariant step's time goes: its matrix-vector products alone, back to back, against the whole step;
each repeat beside its own bandwidth reading (the machine's bandwidth drifts), and prints a markdown table (docs/levers.md keeps the numbers with their date).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from transformers import DynamicCache  # noqa: E402

from playground.kernels import model as kernel_model, ops as kernel_ops  # noqa: E402
from playground.models.load import load_model  # noqa: E402


def best_rate(nbytes: int, fn, reps: int = 5) -> float:
    fn()
    best = min(_timed(fn) for _ in range(reps))
    return nbytes / best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def read_bandwidths(gib: float = 1.0) -> dict[str, float]:
    buf = torch.ones(int(gib * 2**30) // 4)
    out = {"kernels library, every thread": kernel_ops.read_bandwidth(gib)}
    threads = torch.get_num_threads()
    out[f"torch sum, {threads} threads"] = best_rate(buf.numel() * 4, buf.sum)
    torch.set_num_threads(1)
    try:
        out["torch sum, 1 thread"] = best_rate(buf.numel() * 4, buf.sum)
    finally:
        torch.set_num_threads(threads)
    return out


def step_bytes(model: torch.nn.Module) -> int:
    """Bytes of weights one 1-token pass reads: every parameter but the input embedding's table (one row of
    it is read), which counts when it is also the LM head (tied)."""
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    total = sum(p.numel() * p.element_size() for p in model.parameters() if p is not embed)
    if head is embed:
        total += embed.numel() * embed.element_size()
    return total


@torch.inference_mode()
def pass_seconds(model, cache: DynamicCache, n: int, steps: int) -> float:
    """Median seconds of a pass scoring n new tokens on top of the cache (cut back after each)."""
    times = []
    for i in range(steps + 1):
        feed = torch.randint(0, 1000, (1, n))
        start = time.perf_counter()
        model(input_ids=feed, cache=cache, use_cache=True, logits_to_keep=n)
        times.append(time.perf_counter() - start)
        cache.crop(-n)
    return statistics.median(times[1:])


@torch.inference_mode()
def linears_seconds(model, steps: int) -> float:
    """Median seconds of the step's matrix-vector products alone: every projection of one 1-token pass and the
    LM head, back to back, through the same kernels (the model made invariant): the part of a step that
    streams the weights, without attention, norms, rotary and the layers' Python code."""
    from playground.kernels.model import _procs

    projs = [p for m in model.modules() for p in _procs(m)]
    head = model.get_output_embeddings().weight
    inputs = {p.k: torch.randn(1, p.k, dtype=torch.bfloat16) for p in projs}
    x_head = torch.randn(1, head.shape[1], dtype=torch.bfloat16)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        for p in projs:
            p(inputs[p.k])
        kernel_ops.linear(x_head, head)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="pack:qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--steps", type=int, default=24, help="passes per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats of stock and invariant")
    parser.add_argument("--json", help="also write the numbers here")
    args = parser.parse_args()
    if kernel_ops.why_not():
        sys.exit(f"The kernels cannot run here: {kernel_ops.why_not()}")

    model, _ = load_model(args.target, precision="bf16")
    nbytes = step_bytes(model)
    ns = (1, 2, 3, 5, 9, 17)
    modes = ("stock", "invariant")
    times: dict[str, dict[int, list[float]]] = {m: {n: [] for n in ns} for m in modes}
    reads: dict[str, list[float]] = {}
    shares: dict[str, list[float]] = {m: [] for m in modes}  # per repeat: the step's GB/s over that repeat's bandwidth
    gemv: list[float] = []  # per repeat: the invariant step's matrix-vector products alone
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=torch.randint(0, 1000, (1, 128)), cache=cache, use_cache=True, logits_to_keep=1)
        for rep in range(args.repeats):  # the machine's bandwidth drifts: measure it beside every step measurement
            for name, rate in read_bandwidths().items():
                reads.setdefault(name, []).append(rate)
            peak = max(v[-1] for v in reads.values())
            for mode in modes if rep % 2 == 0 else modes[::-1]:
                kernel_model.make_invariant(model, mode == "invariant")
                for n in ns:
                    steps = args.steps if n == 1 else max(4, args.steps // 4)
                    times[mode][n].append(pass_seconds(model, cache, n, steps))
                shares[mode].append(nbytes / times[mode][1][-1] / peak)
            kernel_model.make_invariant(model, True)
            gemv.append(linears_seconds(model, args.steps))
    kernel_model.make_invariant(model, False)
    step = {mode: {n: statistics.median(v) for n, v in per_n.items()} for mode, per_n in times.items()}
    bandwidth = {name: statistics.median(v) for name, v in reads.items()}

    print(f"\nRead bandwidth (best of 5 passes over 1 GiB; median over {args.repeats} repeats):")
    for name, rate in bandwidth.items():
        print(f"- {name}: {rate / 1e9:.1f} GB/s (repeats: {', '.join(f'{r / 1e9:.1f}' for r in reads[name])})")
    print(f"\nOne step of {args.target} (bf16) reads {nbytes / 1e9:.2f} GB of weights.\n")
    print(
        "| kernels | one step | tokens/s | GB/s | of the bandwidth | "
        + " | ".join(f"V({n})/V(1)" for n in ns[1:])
        + " |"
    )
    print("| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in ns[1:]) + " |")
    for mode, v in step.items():
        print(
            f"| {mode} | {v[1] * 1e3:.1f} ms | {1 / v[1]:.2f} | {nbytes / v[1] / 1e9:.1f} | "
            f"{statistics.median(shares[mode]):.0%} | " + " | ".join(f"{v[n] / v[1]:.2f}" for n in ns[1:]) + " |"
        )
    print(
        f"\n'of the bandwidth': the median over repeats of the step's GB/s over the best read rate measured just "
        f"before it. Invariant over stock, one step: {step['stock'][1] / step['invariant'][1]:.2f}x faster."
    )
    mv, whole = statistics.median(gemv), step["invariant"][1]
    print(
        f"Where the invariant step's time goes: its matrix-vector products alone (every projection and the LM "
        f"head back to back) take {mv * 1e3:.1f} ms = {nbytes / mv / 1e9:.1f} GB/s; the rest of the step "
        f"(attention over the cache, norms, rotary, the layers' Python code) {max(whole - mv, 0) * 1e3:.1f} ms "
        f"= {max(whole - mv, 0) / whole:.0%}."
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "target": args.target,
                    "step_bytes": nbytes,
                    "read_bandwidth": reads,
                    "seconds": {m: {str(n): s for n, s in v.items()} for m, v in step.items()},
                    "share_of_bandwidth": shares,
                    "linears_seconds": gemv,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
