"""Prefill (time to first token's forward) and V(1), V(9) with the prefill's KV cache, on a Qwen2.5-1.5B-shaped
model with random bf16 weights (real weights cannot travel): stock torch, then each kernel variant in VARIANTS."""

import os
import statistics
import sys
import time

import torch
from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, os.getcwd())
from playground.kernels import build
from playground.kernels import model as kernel_model

THREADS, PROMPT = int(os.environ.get("THREADS", "2")), int(os.environ.get("PROMPT", "2000"))
LAYERS, VARIANTS = int(os.environ.get("LAYERS", "28")), os.environ.get("VARIANTS", "amx").split(",")
cfg = Qwen2Config(
    hidden_size=1536,
    intermediate_size=8960,
    num_hidden_layers=LAYERS,
    num_attention_heads=12,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=32768,
    rope_theta=1e6,
    tie_word_embeddings=True,
)
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)
model = Qwen2ForCausalLM(cfg).eval()
torch.set_default_dtype(torch.float32)
torch.set_num_threads(THREADS)
ids = torch.randint(0, cfg.vocab_size, (1, PROMPT + 9))


def measure(label):
    with torch.inference_mode():
        t = time.perf_counter()
        out = model(ids[:, :PROMPT], use_cache=True, logits_to_keep=1)
        prefill = time.perf_counter() - t
        cache: DynamicCache = out.past_key_values
        v = {}
        for n in (1, 9, 1, 9, 1, 9, 1, 9, 1, 9):
            t = time.perf_counter()
            model(ids[:, PROMPT : PROMPT + n], past_key_values=cache, use_cache=True)
            v.setdefault(n, []).append(time.perf_counter() - t)
            cache.crop(-n)  # back to the prompt (a negative count drops that many)
    v1, v9 = statistics.median(v[1]), statistics.median(v[9])
    print(
        f"{label:<8} prefill {PROMPT} tokens {prefill:7.2f} s  V(1) {v1 * 1e3:7.1f} ms  V(9) {v9 * 1e3:7.1f} ms  "
        f"V(9)/V(1) {v9 / v1:.3f}  ({LAYERS} layers, {THREADS} threads)",
        flush=True,
    )
    return out.logits[0, -1].float()


stock = measure("stock")
assert kernel_model.make_invariant(model)
for name in VARIANTS:
    build.use(name)
    got = measure(name)
    print(f"{name}: last logits max |diff| vs stock {float((got - stock).abs().max()):.3f}", flush=True)
