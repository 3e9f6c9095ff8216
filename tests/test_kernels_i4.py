"""The int4 draft's kernels (bi_linear_i4 in playground/kernels/*.c, ops.Proj's int4 form, model.quantize_int4):
close to a float product of the dequantised weights, and batch-invariant (a row alone is bitwise the row in any
pass). Each test runs on every kernel variant this CPU executes; skipped where the kernels cannot run."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from playground.kernels import model as kernel_model, ops as kernel_ops
from playground.kernels.ops import Proj, dequantize_i4, quantize_i4
from tests.kernel_support import kernel_variant, require_kernels  # noqa: F401 (a fixture)

require_kernels()
pytestmark = pytest.mark.usefixtures("kernel_variant")


def bf16(*shape: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).bfloat16()


def test_the_int4_format_is_groups_of_nibbles_with_a_scale_each():
    """Per 128 k, byte j holds k0 + j (low nibble) and k0 + 64 + j (high), each q + 8; q = round(w / s) in -7..7,
    s = amax / 7 per group in bf16; K is padded to 128 with q = 0 and the scales past K are 0."""
    w = bf16(3, 160, seed=1)
    packed, scales = quantize_i4(w, 32)
    assert packed.shape == (3, 128) and packed.dtype is torch.uint8  # Kp = 256
    assert scales.shape == (3, 8) and scales.dtype is torch.bfloat16 and (scales[:, 5:] == 0).all()
    groups = w.float().view(3, 5, 32)
    assert torch.equal(scales[:, :5], (groups.abs().amax(-1) / 7).bfloat16())
    q = (groups / scales[:, :5, None].float()).round().clamp(-7, 7).view(3, 160)
    assert torch.equal(packed[:, 0] & 15, (q[:, 0] + 8).to(torch.uint8))
    assert torch.equal(packed[:, 5] >> 4, (q[:, 69] + 8).to(torch.uint8))
    assert torch.equal(packed[:, 64 + 3] & 15, (q[:, 131] + 8).to(torch.uint8))
    assert (packed[:, 64 + 32 :] == 0x88).all()  # k 160..255: the zero point
    deq = dequantize_i4(packed, scales, 160, 32)
    assert torch.equal(deq, q * scales[:, :5].float().repeat_interleave(32, 1))
    assert ((deq - w.float()).abs() <= scales[:, :5].float().repeat_interleave(32, 1) * 0.5 + 1e-6).all()
    with pytest.raises(ValueError, match="does not divide"):
        quantize_i4(w, 64)
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_i4(w, 16)


@pytest.mark.parametrize(
    "n,k,group",
    [(37, 96, 32), (16, 128, 32), (19, 160, 32), (40, 256, 64), (9, 384, 128), (24, 288, 96), (130, 896, 32)],
)
def test_an_int4_row_is_bitwise_the_same_alone_and_in_every_pass_of_1_to_40_rows(n, k, group):
    """Register blocks of 1 to 4 rows against 8 to 4 weight rows (avx512), pairs of rows against 4 (avx2), one
    element at a time (portable): every element by one sequence. n and k leave partial blocks and a partial chunk
    of 128 k; the group sizes take each way a chunk's scales are found."""
    proj = Proj(bf16(n, k, seed=2, scale=0.1), bf16(n, seed=3), int4=True, group_size=group)
    x, resid = bf16(40, k, seed=4), bf16(40, n, seed=5)
    whole, whole_resid = proj(x), proj(x, resid)
    for m in range(1, 41):
        assert torch.equal(proj(x[:m]), whole[:m]), m
        assert torch.equal(proj(x[m - 1 : m])[0], whole[m - 1]), m  # the pass's last row, alone
        assert torch.equal(proj(x[m - 1 : m], resid[m - 1 : m])[0], whole_resid[m - 1]), m
    other = x.clone()
    other[1:] = bf16(39, k, seed=6)  # the other rows' values do not matter either
    assert torch.equal(proj(other)[0], whole[0])
    # against a float product of the dequantised weights: x is quantised per row to int8 (a few % at most)
    exact = x.float() @ proj.dequantized(torch.arange(n)).T + proj.bias.float()
    assert (whole.float() - exact).abs().max() <= 0.03 * exact.abs().max()
    assert ((whole_resid.float() - exact - resid.float()).abs().max()) <= 0.03 * (exact + resid.float()).abs().max()


def test_int4_rows_views_and_bytes():
    proj = Proj(bf16(50, 128, seed=7), bf16(50, seed=8), int4=True)
    x = bf16(3, 128, seed=9)
    part = proj.rows(20)
    assert part.n == 20 and torch.equal(part(x), proj(x)[:, :20])
    assert part.q4.data_ptr() == proj.q4.data_ptr()  # views: no copy
    ids = torch.tensor([3, 17, 49])
    assert torch.equal(proj.dequantized(ids), dequantize_i4(proj.q4, proj.scale4, 128, 32)[ids])
    assert proj.precision == "int4" and proj.nbytes() == 50 * 64 + 50 * 4 * 2 + 50 * 2


def test_an_int4_draft_is_its_dequantised_self_and_the_same_in_every_pass(tiny_models):
    """quantize_int4 on a tiny model (hidden 64: K padded to 128): the layers fused, the Linears' bf16 weights
    freed; its logits near an fp32 copy whose Linears hold the dequantised int4 weights (what is left is the
    activations' int8 and bf16 rounding: the tiny random models amplify any weight noise, so the original fp32
    model is no yardstick); one token at a time with a cache bitwise the whole pass."""
    from playground.models.load import load_model

    ours, _ = load_model(str(tiny_models["target"]), precision="bf16")  # on the kernels: fused in bf16 first
    kernel_model.quantize_int4(ours)
    assert all(layer.self_attn.q_proj.weight.numel() == 0 for layer in ours.model.layers)
    assert all(layer._bi.qkv.precision == layer._bi.down.precision == "int4" for layer in ours.model.layers)
    assert ours.lm_head._bi.precision == "int4" and ours._int4_bytes > 0
    fake, _ = load_model(str(tiny_models["target"]), precision="fp32")
    with torch.no_grad():
        for module in fake.modules():
            if isinstance(module, torch.nn.Linear):
                w = module.weight.bfloat16()
                module.weight.copy_(dequantize_i4(*quantize_i4(w), w.shape[1], 32))
    ids = torch.randint(0, ours.config.vocab_size, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        reference = fake(input_ids=ids).logits
        a = ours(input_ids=ids).logits.float()
        cache = DynamicCache(config=ours.config)
        steps = [ours(input_ids=ids[:, :20], cache=cache).logits[0, -1]]
        steps += [ours(input_ids=ids[:, i : i + 1], cache=cache).logits[0, -1] for i in range(20, 29)]
    assert (a - reference).abs().max() <= 0.25 * reference.abs().max()
    assert (a.argmax(-1) == reference.argmax(-1)).float().mean() >= 0.8
    assert torch.equal(torch.stack(steps).float(), a[0, 19:29])


def test_an_int4_draft_can_keep_its_head_in_bf16(tiny_models):
    from playground.models.load import load_model

    model, _ = load_model(str(tiny_models["target"]), precision="bf16")
    head = model.lm_head.weight
    kernel_model.quantize_int4(model, group_size=64, head=False)
    assert model.lm_head.weight is head and head.numel() and not hasattr(model.lm_head, "_bi")
    assert model.model.layers[0]._bi.qkv.group == 64
    assert kernel_model.can_quantize_int4(model, group_size=48) is not None  # not a multiple of 32
    with torch.inference_mode():
        assert torch.isfinite(model(input_ids=torch.tensor([[1, 2, 3]])).logits).all()


def test_the_int4_precision_loads_through_the_kernels(tiny_models):
    from playground.models.cache import model_bytes
    from playground.models.load import load_model

    draft, _ = load_model(str(tiny_models["draft"]), precision="int4")
    assert draft.model.layers[0]._bi.qkv.precision == "int4" and draft.lm_head._bi.precision == "int4"
    assert model_bytes(draft) < model_bytes(load_model(str(tiny_models["draft"]), precision="bf16")[0])
    assert kernel_ops.variant() is not None


def test_int4_blocks_of_every_shape_give_a_rows_bits_over_many_elements():
    """Every register block shape (rows alone, in blocks of 2, 3, 4, and 40 at once) on 4096 weight rows x 1024 k
    (8 chunks): about 160,000 elements each way. (The float part is nearly exact, products of a 12-bit integer and a
    bf16 scale: an order changed in one block shape would seldom show in the bf16 result at all.)"""
    proj = Proj(bf16(4096, 1024, seed=10, scale=0.1), None, int4=True)
    x = bf16(40, 1024, seed=11)
    alone = torch.cat([proj(x[m : m + 1]) for m in range(40)])
    for rows in (2, 3, 4, 40):
        together = torch.cat([proj(x[m : m + rows]) for m in range(0, 40, rows)])
        assert torch.equal(together, alone), rows
