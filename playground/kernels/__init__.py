"""How the models run on CPU: batch-invariant bf16 kernels near the memory bandwidth, and int8 for a draft.

Why: in bf16 the stock kernels give a position other logits when its pass holds another number of
positions (a 1-row linear takes another kernel than a 2..k-row one; attention reduces over its keys in
blocks that depend on the pass). The target alone scores one position per pass, verification k + 1, a
tree its nodes, a batch B (k + 1): near-ties then flip, and greedy speculative decoding stops being the
target's own output. The kernels compute every output element by one fixed sequence of
operations that depends only on that element's inputs (Thinking Machines, "Defeating Nondeterminism in
LLM Inference", 2025): a linear's row never sees the other rows, a query never sees the other queries
nor the keys masked away from it. A position's logits are then bitwise the same in every pass, so the
target alone, HF generate on the same model object, chains, trees and batches agree exactly.

They are also faster than the stock bf16 path: a linear streams its weight once for all the rows of a
pass, prefetching two blocks ahead into L2, straight from the nn.Linear's own storage; a Llama / Qwen2
decoder layer runs as nine kernel calls instead of about forty torch ops (the q/k/v and gate/up weights
stacked, the Linears keeping views of them).

- `model.make_invariant(model)`: a loaded bf16 CPU model, in place (its attention registered with transformers
  as "invariant"); `make_invariant(model, False)` puts torch's kernels back.
- `model.quantize_int8(model)`: a bf16 draft's weights in int8, its layers fused the same way;
  `model.quantize_int4(model, group_size=32, head=True)`: in int4 (groups of 32 along K, a bf16 scale each).
- `wide`: a draft's passes of many rows (a long prompt's prefill) on torch's matmul: deterministic, not
  batch-invariant (a draft's tokens change only the speed); `step.LeanForward(model, wide=True)` takes it.

One C source per instruction set, each built once into the cache with a C compiler and chosen at run time from the
CPU's flags (`ops.VARIANTS`, forced by PLAYGROUND_KERNELS): avx512.c (AVX512-BF16 and -VNNI), avx2.c (AVX2 and FMA),
portable.c (plain C: aarch64 and any other CPU). portable.c is the base: the others include it and replace only the
hot kernels (the linears, attention). Each is batch-invariant on its own; two variants may differ from each other in
the last bits. Where none runs (no compiler, PLAYGROUND_KERNELS=off) `ops.why_not()` says why and
models keep torch's kernels; `ops.describe()` is the start-up's line. fp32 models are left alone (torch's fp32 path
is exact between passes here). CUDA is not covered: docs/exactness.md.
"""
