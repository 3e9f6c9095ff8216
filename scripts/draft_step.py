"""The draft's one-token step, broken down (issue 43): HF's wrapper around the fused int8 layers against the lean
forward (playground/kernels/step.py), and what the weight stream alone takes.

    flock /tmp/cpu.lock python scripts/draft_step.py [--spec pack:qwen2.5-coder-0.5b-instruct] [--context 200]

Every figure is a median over --steps one-token steps on a cache of --context positions (cropped back after each
step, as the drafter does after a rejection). The HF path is also run instrumented: each ctypes kernel call, each
DynamicCache.update and each decoder layer timed with perf_counter (the instrumented total is shown with it: the
timers add their own cost). The lean forward's logits are checked to be HF's, bitwise, at every step.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
import types
from collections import defaultdict

import torch
from transformers import DynamicCache

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))

from playground.core.config import Precision
from playground.engine.cache import crop_cache
from playground.kernels import model as fused, ops
from playground.kernels.step import LeanForward, _head
from playground.models.load import load_model

KERNELS = ("bi_linear_i8", "bi_linear", "bi_rmsnorm", "bi_rotary_split", "bi_attention", "bi_silu_mul")


def median_ms(times: list[float]) -> float:
    return round(statistics.median(times) * 1e3, 3)


def hf_step(model, cache, token, context):
    out = model(input_ids=token, cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1]
    crop_cache(cache, context)
    return out


def instrumented(model, cache, tokens, context) -> dict[str, float]:
    """One pass of HF steps with every kernel call, cache update and layer timed (medians per step, ms)."""
    lib = ops.library()
    spent: dict[str, float] = defaultdict(float)
    originals = {name: getattr(lib, name) for name in KERNELS}

    def timed(name, fn):
        def call(*args, **kwargs):
            start = time.perf_counter()
            result = fn(*args, **kwargs)
            spent[name] += time.perf_counter() - start
            return result

        return call

    for name, fn in originals.items():
        setattr(lib, name, timed(name, fn))
    update = DynamicCache.update
    DynamicCache.update = lambda self, *a, **k: timed("cache.update", update)(self, *a, **k)
    layers = model.model.layers
    for layer in layers:
        layer.forward = timed("layers", layer.forward)
    per_step: dict[str, list[float]] = defaultdict(list)
    try:
        for token in tokens:
            spent.clear()
            start = time.perf_counter()
            hf_step(model, cache, token, context)
            spent["total"] = time.perf_counter() - start
            for key, value in spent.items():
                per_step[key].append(value)
    finally:
        for name, fn in originals.items():
            setattr(lib, name, fn)
        DynamicCache.update = update
        for layer in layers:  # the fused forward back
            layer.forward = types.MethodType(fused._layer_forward, layer)
    return {k: median_ms(v) for k, v in per_step.items()}


def call_costs(reps: int = 2000) -> dict[str, float]:
    """µs per ctypes call: a kernel that runs serially on one row (bi_rmsnorm, M = 1) and one that opens an
    OpenMP parallel region over almost nothing (read_sum of 32 floats): their difference ~ one fork/join."""
    lib = ops.library()
    x, w, out = (torch.ones(896, dtype=torch.bfloat16) for _ in range(3))
    buf = torch.ones(32, dtype=torch.float32)
    result = {}
    for name, fn in (
        ("rmsnorm_1row_us", lambda: lib.bi_rmsnorm(x.data_ptr(), 1, 896, w.data_ptr(), 1e-6, out.data_ptr())),
        ("parallel_region_us", lambda: lib.read_sum(buf.data_ptr(), 32, 1)),
    ):
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        result[name] = round(statistics.median(times) * 1e6, 2)
    return result


def linears_alone(model, reps: int) -> float:
    """ms for every projection of a step (the layers' four and the head) called back to back on one row."""
    procs = [p for l in model.model.layers for p in (l._bi.qkv, l._bi.o, l._bi.gate_up, l._bi.down)]
    procs.append(_head(model))
    inputs = [torch.randn(1, p.k).bfloat16() for p in procs]
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for p, x in zip(procs, inputs):
            p(x)
        times.append(time.perf_counter() - start)
    return median_ms(times)


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default="pack:qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--precision", default="int8", help="int8 (the draft's) or bf16 (the target's)")
    args = parser.parse_args()
    model, _ = load_model(args.spec, precision=Precision(args.precision))
    torch.manual_seed(0)
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (1, args.context))
    tokens = [torch.randint(0, vocab, (1, 1)) for _ in range(args.steps)]
    cache, lean = DynamicCache(), LeanForward(model)
    model(input_ids=prompt, cache=cache, use_cache=True, logits_to_keep=1)
    lean(prompt)
    hf, ours, same = [], [], True
    for token in tokens[:10]:  # warm-up
        hf_step(model, cache, token, args.context)
        lean(token)
        lean.crop(args.context)
    for token in tokens:  # interleaved: both see the same machine state
        start = time.perf_counter()
        a = hf_step(model, cache, token, args.context)
        hf.append(time.perf_counter() - start)
        start = time.perf_counter()
        b = lean(token)
        lean.crop(args.context)
        ours.append(time.perf_counter() - start)
        same &= torch.equal(a, b)
    procs = [p for l in model.model.layers for p in (l._bi.qkv, l._bi.o, l._bi.gate_up, l._bi.down)]
    weight_bytes = sum(p.nbytes() for p in [*procs, _head(model)])
    bandwidth = ops.read_bandwidth()
    report = {
        "spec": args.spec,
        "precision": args.precision,
        "context": args.context,
        "steps": args.steps,
        "kernels": ops.variant(),
        "threads": torch.get_num_threads(),
        "weights_MB": round(weight_bytes / 1e6, 1),
        "read_bandwidth_GBps": round(bandwidth / 1e9, 1),
        "weight_stream_ms": round(weight_bytes / bandwidth * 1e3, 3),
        "linears_alone_ms (python loop, 97 calls)": linears_alone(model, max(20, args.steps // 4)),
        "hf_step_ms": median_ms(hf),
        "lean_step_ms": median_ms(ours),
        "lean_logits_bitwise_hf": bool(same),
        "hf_instrumented_ms": instrumented(model, cache, tokens, args.context),
        "call_costs": call_costs(),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
