"""A draft's passes of many rows (a long prompt's prefill) on torch's matmul instead of the batch-invariant kernels.

Why: a draft's tokens change only the speed, never the output (the target verifies them), so a draft needs
determinism, not batch invariance. The kernels' int4 and int8 linears are made for a few rows, and a long prompt's
pass on them is slower than oneDNN's (AMX tiles on Intel, AVX512-BF16 on Zen 4; the gap: docs/exactness.md). Here a
layer's projection is dequantised to a bf16 temporary (one layer's at a time: no second copy of the weights) and
multiplied by `torch.nn.functional.linear`; an int8 projection multiplies its quantised rows by `torch._int_mm`
(integer sums, exact in any order), so its outputs are the kernels' own. Norms, rotary embedding, attention and SiLU
stay on the kernels (row by row already). One process, one prompt: the same draft tokens every time.

`LeanForward(model, wide=True)` (a draft's, never the target's) runs its passes of at least WIDE_ROWS rows here;
`threshold(None)` puts every pass back on the kernels (an A/B: scripts/draft_prefill.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from playground.core.config import K_MAX
from playground.core.treeshape import MAX_TREE_NODES
from playground.kernels.ops import CHUNK_I4, Proj, attention, cpu_flags, library, rms_norm

# From this many rows a draft's pass runs here: above every few-row pass (a chain's k + 1 <= K_MAX + 1, a token tree's
# MAX_TREE_NODES + 1), which keep the kernels as they are; and where the dequantisation (a few passes over the layer's
# weights, whatever the rows) is paid back. Where oneDNN has AMX tiles the kernels' int4 linear takes several times its
# time per row and the break-even is near 100 rows; with AVX512-BF16 alone (Zen 4) the gap per row is smaller and the
# break-even several hundred rows (estimates from issue 53's table; scripts/draft_prefill.py --prompt N measures it).
WIDE_ROWS: int | None = 128 if "amx_bf16" in cpu_flags() else 512
assert WIDE_ROWS > max(K_MAX, MAX_TREE_NODES) + 1


def rows() -> int | None:
    """The rows from which a wide-enabled pass runs here (None: never)."""
    return WIDE_ROWS


@contextlib.contextmanager
def threshold(rows: int | None) -> Iterator[None]:
    """WIDE_ROWS set to `rows` (None: every pass on the kernels, the old path) for the block's duration."""
    global WIDE_ROWS
    previous, WIDE_ROWS = WIDE_ROWS, rows
    try:
        yield
    finally:
        WIDE_ROWS = previous


def dense(p: Proj) -> torch.Tensor:
    """The projection's weight (n, k) in bf16: its own, or its int8 rows times their scales, or its int4 nibbles
    (ops.quantize_i4's layout) less 8 times their group's scale, each rounded once to bf16 (a temporary)."""
    if p.weight is not None:
        return p.weight
    if p.q is not None:
        return (p.q.to(torch.float32) * p.scale[:, None]).to(torch.bfloat16)
    n, half = p.q4.shape
    packed = p.q4.view(n, half // (CHUNK_I4 // 2), CHUNK_I4 // 2)
    nibbles = torch.empty((n, packed.shape[1], 2, CHUNK_I4 // 2), dtype=torch.uint8)
    torch.bitwise_and(packed, 15, out=nibbles[:, :, 0])
    torch.bitwise_right_shift(packed, 4, out=nibbles[:, :, 1])
    w = nibbles.view(n, 2 * half)[:, : p.k].to(torch.bfloat16).sub_(8)  # q in -7..7: exact in bf16
    groups = p.k // p.group
    return w.view(n, groups, p.group).mul_(p.scale4[:, :groups, None]).view(n, p.k)


def _int8(p: Proj, x: torch.Tensor) -> torch.Tensor:
    """The int8 kernels' linear by torch._int_mm: x quantised per row as bi_quantize_rows does (amax / 127, rounded to
    even), the exact integer sums, then y = (sx * sw) * sum (+ bias), rounded to bf16, as their epilogue."""
    xf = x.float()
    s = xf.abs().amax(1) / 127.0
    s = torch.where(s > 0, s, 1.0)
    xq = torch.round(xf * (1.0 / s)[:, None]).clamp_(-128, 127).to(torch.int8)
    y = (s[:, None] * p.scale[None, :]) * torch._int_mm(xq, p.q.t()).float()
    if p.bias is not None:
        y += p.bias.float()
    return y.to(torch.bfloat16)


def linear(p: Proj, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
    """p(x, residual) for x (M, k) bf16 on torch's matmul: the result rounded to bf16, then + residual, rounded."""
    out = _int8(p, x) if p.q is not None else torch.nn.functional.linear(x, dense(p), p.bias)
    return out if residual is None else out.add_(residual)


def forward(lean, tokens: torch.Tensor, keep: int, logits: bool) -> torch.Tensor:
    """kernels/step.c's model_pass for a causal pass of tokens (S,) on top of the lean forward's cache (which then
    holds them), its projections by `linear`: the last `keep` positions' logits (keep, vocab), or their final-norm
    hidden states with logits=False. The head (keep rows) stays on the kernels."""
    lib, inner = library(), lean.model.model
    S, pos = tokens.numel(), lean.length
    end = pos + S
    x = inner.embed_tokens.weight.index_select(0, tokens)
    cos, sin = lean.cos[pos:end], lean.sin[pos:end]
    for i, layer in enumerate(inner.layers):
        f, a = layer._bi, layer.self_attn
        h = rms_norm(x, layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon)
        qkv = linear(f.qkv, h)
        q = torch.empty((1, f.heads, S, f.head_dim), dtype=torch.bfloat16)
        k = torch.empty((1, f.kv_heads, S, f.head_dim), dtype=torch.bfloat16)
        v = torch.empty_like(k)
        ptrs = [t.data_ptr() for t in (qkv, cos, sin, q, k, v)]
        lib.bi_rotary_split(ptrs[0], 1, S, f.heads, f.kv_heads, f.head_dim, *ptrs[1:])
        lean.keys[i, :, pos:end], lean.values[i, :, pos:end] = k[0], v[0]
        keys, values = lean.keys[i, None, :, :end], lean.values[i, None, :, :end]
        out, _ = attention(a, q, keys, values, None, a.scaling)  # None: causal, the queries last
        x = linear(f.o, out.view(S, f.heads * f.head_dim), residual=x)
        norm = layer.post_attention_layernorm
        gate_up = linear(f.gate_up, rms_norm(x, norm.weight, norm.variance_epsilon))
        act = torch.empty((S, gate_up.shape[-1] // 2), dtype=torch.bfloat16)
        lib.bi_silu_mul(gate_up.data_ptr(), S, act.shape[-1], act.data_ptr())
        x = linear(f.down, act, residual=x)
    hidden = rms_norm(x[S - keep :].contiguous(), inner.norm.weight, inner.norm.variance_epsilon)
    lean.length = end
    return lean._head(hidden) if logits else hidden
