"""The draft's prompt pass, old path against new (issue 53, item 5): the default int4 draft's prefill of PROMPT tokens
on the kernels (`wide.threshold(None)`) and on torch's matmul (playground/kernels/wide.py), interleaved, REPS each.

    python scripts/draft_prefill.py [--spec pack:qwen2.5-coder-0.5b-instruct] [--prompt 2000] [--reps 3]

Where the draft cannot be loaded (a device without the packs: weights cannot travel) a Qwen2.5-0.5B-shaped model with
random weights, quantised to int4 the same way: the time depends on the shapes only. "new" is forced whatever this
CPU's threshold (wide.WIDE_ROWS, printed): --prompt N around it measures the break-even. Also says whether the new pass
gives the same logits twice (it must) and whether its next token is the old pass's. The first round's share of the
draft: `python -m playground.bench --ttft 2000 --ttft-draft-ab` (bench/ttft.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground.core.config import Precision
from playground.kernels import model as fused, ops, wide
from playground.kernels.step import LeanForward


def random_draft() -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_theta=1e6,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    model = Qwen2ForCausalLM(config).eval()
    torch.set_default_dtype(torch.float32)
    return fused.quantize_int4(model)


def load(spec: str) -> tuple[torch.nn.Module, str]:
    try:
        from playground.models.load import load_model

        return load_model(spec, precision=Precision.INT4)[0], spec
    except Exception as exc:  # noqa: BLE001 (any reason the real draft is missing: the random one instead)
        print(f"{spec} not loaded ({type(exc).__name__}: {exc}); a random model of its shapes", flush=True)
        return random_draft(), "random Qwen2.5-0.5B shapes, int4"


@torch.inference_mode()
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", default="pack:qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--prompt", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    model, name = load(args.spec)
    ids = torch.randint(0, model.config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    lean = LeanForward(model, capacity=args.prompt + 16, wide=True)
    default = wide.WIDE_ROWS  # the CPU's threshold; "new" forces the wide pass whatever the prompt's length
    with wide.threshold(args.prompt):
        lean(ids)  # first-call costs (oneDNN's primitives), outside the timing
    seconds: dict[str, list[float]] = {"old": [], "new": []}
    logits: dict[str, list[torch.Tensor]] = {"old": [], "new": []}
    for rep in range(args.reps):
        for mode in ("old", "new") if rep % 2 == 0 else ("new", "old"):
            lean.reset()
            with wide.threshold(None if mode == "old" else args.prompt):
                start = time.perf_counter()
                logits[mode].append(lean(ids))
                seconds[mode].append(time.perf_counter() - start)
    old, new = (statistics.median(seconds[m]) for m in ("old", "new"))
    print(f"{name}, {ops.describe()}, {torch.get_num_threads()} threads, {args.prompt}-token prefill, {args.reps} reps")
    print(f"this CPU's threshold: wide.WIDE_ROWS = {default} (the app's draft takes the new pass from there)")
    print(f"old (kernels) {old:.2f} s  new (kernels/wide.py) {new:.2f} s  new/old {new / old:.3f}")
    same = all(torch.equal(t, logits["new"][0]) for t in logits["new"])
    agree = bool(logits["new"][0].argmax() == logits["old"][0].argmax())
    print(f"new pass deterministic: {same}; its next token is the old pass's: {agree}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
