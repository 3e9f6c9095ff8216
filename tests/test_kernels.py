"""The batch-invariant kernels (playground/kernels/): a row's result never depends on the pass it is in.

Every test compares a computation inside a larger pass with the same computation alone, bitwise.
They need a CPU with AVX512-BF16 and a C compiler; elsewhere they are skipped with the reason. Under
PLAYGROUND_REQUIRE_KERNELS=1 (scripts/test.sh) kernels that did not load on such a machine are a failure.
"""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from playground.kernels import model as kernel_model, ops as kernel_ops
from tests.kernel_support import kernel_variant, require_kernels  # noqa: F401 (a fixture)

require_kernels()  # skipped with the reason where the kernels cannot run (tests/kernel_support.py)
# Each test runs on every kernel variant this CPU executes (amx, avx512, avx2, portable); the others skip, saying why.
pytestmark = pytest.mark.usefixtures("kernel_variant")


def bf16(*shape: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).bfloat16()


# ---------------------------------------------------------------- linear


@pytest.mark.parametrize("n,k", [(100, 200), (96, 64), (13, 48), (1537, 96)])
def test_a_linear_row_is_bitwise_the_same_in_every_pass_size(n, k):
    w, b, x = bf16(n, k, seed=1, scale=0.1), bf16(n, seed=2), bf16(41, k, seed=3)
    whole = kernel_ops.linear(x, w, b)
    for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 33, 41):
        part = kernel_ops.linear(x[:m], w, b)
        assert torch.equal(part, whole[:m]), m
        alone = kernel_ops.linear(x[m - 1 : m], w, b)  # the pass's last row, alone
        assert torch.equal(alone[0], whole[m - 1]), m


def test_a_linear_row_is_its_definition_in_every_pass_of_1_to_4096_rows():
    """Every row count picks its own register blocks, cache blocks and remainders (bi_linear's shape()); each
    must compute every element as the one-element definition does (bi_linear_ref), bitwise. 29 weight rows and
    80 inputs leave a partial block of weight rows and a partial chunk of 32 inputs in every pass."""
    w, b, x = bf16(29, 80, seed=21, scale=0.1), bf16(29, seed=22), bf16(4096, 80, seed=23)
    resid = bf16(4096, 29, seed=24)
    ref = kernel_ops.linear(x, w, b, reference=True)
    ref_resid = kernel_ops.linear(x, w, b, resid, reference=True)
    for m in range(1, 4097):
        assert torch.equal(kernel_ops.linear(x[:m], w, b), ref[:m]), m
        if m <= 40 or m % 97 == 0:
            assert torch.equal(kernel_ops.linear(x[:m], w, b, resid[:m]), ref_resid[:m]), m


def test_a_linear_of_many_rows_is_its_definition_with_partial_chunks_and_panels():
    """Passes of many rows take other code (avx2.c: repacked weight panels of 16 rows, 512 packed at once, an
    outer-product micro-kernel of 6 rows): 1100 weight rows (three packings, a partial panel) and 200 inputs (a
    partial chunk), with a bias and a residual, must give the definition's bits."""
    w, b, x = bf16(1100, 200, seed=29, scale=0.1), bf16(1100, seed=30), bf16(301, 200, seed=31)
    resid = bf16(301, 1100, seed=32)
    ref = kernel_ops.linear(x, w, b, resid, reference=True)
    for m in (24, 25, 29, 301):
        assert torch.equal(kernel_ops.linear(x[:m], w, b, resid[:m]), ref[:m]), m


def test_an_int8_row_is_the_same_in_every_pass_of_1_to_300_rows():
    """The int8 draft's linear (16 weight rows a block, taken 16 or 8 at a time, pairs of input rows and a single
    one): integer sums are exact, and every output element goes through the same epilogue whatever its block.
    37 weight rows and 100 inputs leave partial blocks and a partial chunk of 64."""
    from playground.kernels.ops import Proj

    proj = Proj(bf16(37, 100, seed=25, scale=0.1), bf16(37, seed=26), int8=True)
    x, resid = bf16(300, 100, seed=27), bf16(300, 37, seed=28)
    whole, whole_resid = proj(x), proj(x, resid)
    for m in range(1, 301):
        assert torch.equal(proj(x[:m]), whole[:m]), m
        assert torch.equal(proj(x[m - 1 : m], resid[m - 1 : m])[0], whole_resid[m - 1]), m
    exact = x.float() @ proj.dequantized(torch.arange(37)).T + proj.bias.float()
    assert (whole.float() - exact).abs().max() <= 0.05 * exact.abs().max()  # int8 activations: a few % at most


def test_a_linear_row_does_not_depend_on_the_other_rows_values():
    w, x = bf16(64, 96, seed=4, scale=0.1), bf16(6, 96, seed=5)
    other = x.clone()
    other[1:] = bf16(5, 96, seed=6)
    assert torch.equal(kernel_ops.linear(x, w)[0], kernel_ops.linear(other, w)[0])


def test_linear_agrees_with_an_fp32_reference_to_bf16_rounding():
    w, b, x = bf16(300, 256, seed=7, scale=0.05), bf16(300, seed=8), bf16(5, 256, seed=9)
    exact = x.float() @ w.float().T + b.float()
    ours = kernel_ops.linear(x, w, b).float()
    assert (ours - exact).abs().max() <= exact.abs().max() * 2**-7  # one bf16 rounding of the result


def test_linear_takes_batched_and_strided_inputs():
    w, x = bf16(40, 64, seed=10), bf16(2, 3, 128, seed=11)[..., ::2]  # (2, 3, 64), not contiguous
    out = kernel_ops.linear(x, w)
    assert out.shape == (2, 3, 40)
    assert torch.equal(out[1, 2], kernel_ops.linear(x[1, 2:3].contiguous(), w)[0])


# ---------------------------------------------------------------- attention


def attend(q, k, v, mask=None):
    return kernel_ops.attention(None, q, k, v, mask)[0]  # (B, Q, H, D)


def sdpa(q, k, v, mask):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1).float(), v.repeat_interleave(g, 1).float()
    return torch.nn.functional.scaled_dot_product_attention(q.float(), k, v, attn_mask=mask).transpose(1, 2)


@pytest.mark.parametrize("d", [16, 32, 48, 128])
def test_attention_agrees_with_sdpa(d):
    q, k, v = bf16(2, 4, 5, d, seed=12), bf16(2, 2, 9, d, seed=13), bf16(2, 2, 9, d, seed=14)
    causal = torch.ones(5, 9, dtype=torch.bool).tril(4)
    ours = attend(q, k, v).float()  # no mask: causal, the queries last
    assert (ours - sdpa(q, k, v, causal)).abs().max() < 2e-2
    holes = causal.clone()
    holes[:, 2] = False
    float_mask = torch.zeros(1, 1, 5, 9, dtype=torch.bfloat16).masked_fill(~holes, torch.finfo(torch.bfloat16).min)
    assert (attend(q, k, v, float_mask).float() - sdpa(q, k, v, holes)).abs().max() < 2e-2
    assert torch.equal(attend(q, k, v, float_mask), attend(q, k, v, holes[None, None]))


@pytest.mark.parametrize("heads,kv_heads,d", [(12, 2, 128), (14, 2, 64), (4, 2, 48), (2, 1, 256), (3, 3, 16)])
def test_attention_is_its_definition_for_every_pass(heads, kv_heads, d):
    """The blocked attention (a block of query rows sharing each key and value row) against the one-query-at-a-
    time definition (bi_attention_ref), bitwise: causal passes of 1..40 queries and a few long ones, and masks
    with holes, a row that sees nothing, and a batch of two."""
    g = torch.Generator().manual_seed(heads * d)
    for q_len in [*range(1, 41), 97, 300, 1000]:
        context = q_len + int(torch.randint(0, 30, (1,), generator=g))
        q, k, v = (
            bf16(1, n, length, d, seed=q_len + i)
            for i, (n, length) in enumerate([(heads, q_len), (kv_heads, context), (kv_heads, context)])
        )
        assert torch.equal(
            kernel_ops.attention(None, q, k, v, None)[0], kernel_ops.attention(None, q, k, v, None, reference=True)[0]
        ), q_len
        if q_len <= 40:
            mask = torch.rand(2, 1, q_len, context, generator=g) > 0.3
            mask[1, 0, 0] = False
            q2, k2, v2 = (torch.cat([t, t.flip(-1)]) for t in (q, k, v))
            assert torch.equal(
                kernel_ops.attention(None, q2, k2, v2, mask)[0],
                kernel_ops.attention(None, q2, k2, v2, mask, reference=True)[0],
            ), q_len


def test_a_query_does_not_depend_on_the_other_queries_of_its_pass():
    q, k, v = bf16(1, 4, 6, 64, seed=15), bf16(1, 2, 20, 64, seed=16), bf16(1, 2, 20, 64, seed=17)
    whole = attend(q, k, v)  # 6 queries at positions 14..19
    for i in range(6):
        alone = attend(q[:, :, i : i + 1], k[:, :, : 15 + i], v[:, :, : 15 + i])  # the target alone's pass
        assert torch.equal(alone[:, 0], whole[:, i])


def test_a_masked_key_is_skipped_not_counted():
    """A tree node or a batch row sees its keys through holes; the result equals the same keys packed."""
    q, k, v = bf16(1, 2, 1, 32, seed=18), bf16(1, 1, 12, 32, seed=19), bf16(1, 1, 12, 32, seed=20)
    seen = torch.tensor([0, 1, 2, 5, 8, 11])
    mask = torch.zeros(1, 1, 1, 12, dtype=torch.bool)
    mask[..., seen] = True
    holed = attend(q, k, v, mask)
    packed = attend(q, k[:, :, seen], v[:, :, seen])
    assert torch.equal(holed, packed)


# ---------------------------------------------------------------- a model


@pytest.fixture(scope="module")
def bf16_target(tiny_models):
    from playground.models.load import load_model

    model, _ = load_model(str(tiny_models["target"]), precision="bf16")
    assert kernel_model.make_invariant(model)
    return model


@torch.inference_mode()
def logits_one_by_one(model, ids: list[int], start: int) -> torch.Tensor:
    cache = DynamicCache(config=model.config)
    rows = [model(input_ids=torch.tensor([ids[:start]]), cache=cache).logits[0, -1]]
    for t in ids[start:-1]:
        rows.append(model(input_ids=torch.tensor([[t]]), cache=cache).logits[0, -1])
    return torch.stack(rows)


@torch.inference_mode()
def logits_in_passes(model, ids: list[int], start: int, width: int) -> torch.Tensor:
    cache = DynamicCache(config=model.config)
    rows = [model(input_ids=torch.tensor([ids[:start]]), cache=cache).logits[0, -1:]]
    for at in range(start, len(ids) - 1, width):
        rows.append(model(input_ids=torch.tensor([ids[at : min(at + width, len(ids) - 1)]]), cache=cache).logits[0])
    return torch.cat(rows)


def test_a_positions_logits_are_bitwise_the_same_in_passes_of_every_size(bf16_target):
    ids = torch.randint(0, bf16_target.config.vocab_size, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    one = logits_one_by_one(bf16_target, ids, 8)
    for width in (2, 5, 9, 17, 31):
        assert torch.equal(logits_in_passes(bf16_target, ids, 8, width), one), width


def test_switching_off_restores_torchs_kernels(tiny_models):
    from playground.models.load import load_model

    model, _ = load_model(str(tiny_models["target"]), precision="bf16")
    assert kernel_model.is_invariant(model)  # a bf16 CPU model loads on the kernels
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.inference_mode():
        assert not kernel_model.make_invariant(model, False)
        assert model.config._attn_implementation == "sdpa" and not kernel_model.is_invariant(model)
        assert not any("forward" in m.__dict__ for m in model.modules())
        stock = model(input_ids=ids).logits
        assert kernel_model.make_invariant(model) and model.config._attn_implementation == kernel_ops.NAME
        assert not torch.equal(model(input_ids=ids).logits, stock)  # other kernels, other rounding
        kernel_model.make_invariant(model, False)
        assert torch.equal(model(input_ids=ids).logits, stock)


def test_fp32_models_are_left_alone(tiny_pair):
    assert kernel_model.can_make_invariant(tiny_pair.target) == "the model is float32, not bf16"
    assert not kernel_model.make_invariant(tiny_pair.target)


def test_the_invariant_model_computes_what_the_fp32_model_does_to_bf16_precision(bf16_target, tiny_models, tiny_pair):
    """The fused decoder layers (norm, q/k/v, rotary, attention, o + residual, norm, gate/up, SiLU, down +
    residual) against the same weights in fp32 through transformers' own code: no further from it than
    transformers' own bf16 computation is (a wrong kernel is off by the logits' whole scale)."""
    from playground.models.load import load_model

    assert all("forward" in layer.__dict__ for layer in bf16_target.model.layers)  # the fused path ran
    stock, _ = load_model(str(tiny_models["target"]), precision="bf16")
    ids = torch.randint(0, bf16_target.config.vocab_size, (1, 30), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        reference = tiny_pair.target(input_ids=ids).logits
        ours = (bf16_target(input_ids=ids).logits.float() - reference).abs().max()
        theirs = (stock(input_ids=ids).logits.float() - reference).abs().max()
    assert ours <= 2 * theirs, (ours, theirs)


def test_an_int8_draft_is_as_close_to_its_fp32_self_as_torchs_int8(tiny_models, tiny_pair):
    """The int8 kernels (one scale per weight row, activations quantised per row) against fp32, with torch's own
    dynamic int8 quantisation (the draft's int8 where these kernels cannot run) as the yardstick."""
    from playground.models.load import load_model

    ours, _ = load_model(str(tiny_models["target"]), precision="bf16")
    kernel_model.quantize_int8(ours)
    theirs, _ = load_model(str(tiny_models["target"]), precision="int8")  # torch's quantize_dynamic
    assert all(layer.self_attn.q_proj.weight.numel() == 0 for layer in ours.model.layers)  # bf16 copies freed
    ids = torch.randint(0, ours.config.vocab_size, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        reference = tiny_pair.target(input_ids=ids).logits
        a, b = ours(input_ids=ids).logits.float(), theirs(input_ids=ids).logits.float()
        cache = DynamicCache(config=ours.config)  # and with a cache, one token at a time
        steps = [ours(input_ids=ids[:, :20], cache=cache).logits[0, -1]]
        steps += [ours(input_ids=ids[:, i : i + 1], cache=cache).logits[0, -1] for i in range(20, 29)]
    assert (a - reference).abs().max() <= 1.5 * (b - reference).abs().max()
    agree = lambda x: (x.argmax(-1) == reference.argmax(-1)).float().mean()
    assert agree(a) >= agree(b) - 0.1
    assert torch.equal(torch.stack(steps).float(), a[0, 19:29])  # integer sums: the same in every pass
