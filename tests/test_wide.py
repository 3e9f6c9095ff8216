"""A draft's passes of many rows on torch's matmul (playground/kernels/wide.py): deterministic, close to the kernels'
(the int8 linears bitwise theirs), only from wide.WIDE_ROWS rows, and the target's output unchanged."""

from __future__ import annotations

import pytest
import torch

from playground.core.config import K_MAX, DecodeConfig, SamplingParams
from playground.core.treeshape import MAX_TREE_NODES
from playground.decoding.model import ModelDrafter
from playground.engine import SpeculativeDecoder
from playground.kernels import model as kernel_model
from playground.kernels import wide
from playground.kernels.ops import Proj
from playground.kernels.step import LeanForward, target_cache
from playground.models import tiny
from tests.helpers import target_greedy
from tests.kernel_support import kernel_variant, require_kernels  # noqa: F401 (a fixture)

require_kernels()
pytestmark = pytest.mark.usefixtures("kernel_variant")

WIDE, DEFAULT = 128, wide.WIDE_ROWS  # the tests' threshold on every CPU; the default, the CPU's
LONG = WIDE + 60


@pytest.fixture(autouse=True)
def threshold():
    with wide.threshold(WIDE):
        yield


QUANTISE = {"int8": kernel_model.quantize_int8, "int4": kernel_model.quantize_int4, "bf16": kernel_model.make_invariant}


def _draft(precision: str, seed: int = 7, hidden: int = 64) -> torch.nn.Module:
    """A tiny random Llama (4 layers) in bf16 on the kernels, or quantised by them."""
    model = tiny.build_model(None, vocab_size=300, eos=1, seed=seed, layers=4, hidden=hidden, save=False)
    model = model.to(torch.bfloat16).eval()
    QUANTISE[precision](model)
    return model


def _prompt(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(2, 300, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("rows", [WIDE, 3 * WIDE + 5])
def test_an_int8_projection_on_torchs_int_mm_is_the_kernels_own_bitwise(rows):
    """The exact integer sums by torch._int_mm (AMX-INT8 through oneDNN where the CPU has it) and the kernels'
    quantisation and epilogue: a bias, a residual, every element the kernels' bits."""
    g = torch.Generator().manual_seed(rows)
    weight = (torch.randn(200, 160, generator=g) * 0.05).to(torch.bfloat16)
    bias = (torch.randn(200, generator=g) * 0.1).to(torch.bfloat16)
    p = Proj(weight, bias, int8=True)
    x = torch.randn(rows, 160, generator=g).to(torch.bfloat16)
    residual = torch.randn(rows, 200, generator=g).to(torch.bfloat16)
    assert torch.equal(wide.linear(p, x), p(x))
    assert torch.equal(wide.linear(p, x, residual=residual.clone()), p(x, residual=residual))


@pytest.mark.parametrize("precision", ["int4", "int8"])
def test_the_dequantised_weight_is_the_projections_own(precision):
    """dense(): the quantised rows times their scales, as ops.Proj.dequantized gives them, rounded to bf16."""
    weight = (torch.randn(96, 256, generator=torch.Generator().manual_seed(3)) * 0.05).to(torch.bfloat16)
    p = Proj(weight, None, int8=precision == "int8", int4=precision == "int4", group_size=32)
    assert torch.equal(wide.dense(p), p.dequantized(torch.arange(96)).to(torch.bfloat16))


@pytest.mark.parametrize("precision", ["int4", "int8", "bf16"])
@torch.inference_mode()
def test_a_long_prompts_pass_is_deterministic_and_agrees_with_the_kernels(precision):
    """The same prompt, fresh caches: the same logits bit for bit every time; against the kernels' pass, the same
    top-1 token at nearly every position (int8: bitwise the same); the next one-token steps, on the kernels again, read
    the keys and values the wide pass wrote (the same top-1 as the kernels' cache gives)."""
    model, ids = _draft(precision), _prompt(LONG)
    keep = ids.shape[1]
    runs = [LeanForward(model, wide=True) for _ in range(2)]
    first, again = (lean(ids, keep=keep) for lean in runs)
    assert [lean.wide_passes for lean in runs] == [1, 1] and runs[0].length == keep
    assert torch.equal(first, again)
    narrow = LeanForward(model)
    old = narrow(ids, keep=keep)
    agree = (first.argmax(-1) == old.argmax(-1)).float().mean().item()
    # int4: the kernels quantise activations to int8, the wide pass keeps them bf16; on this random model (int4 and
    # bf16 agree on about a fifth of the positions) the two int4 passes agree on about 0.83 of them
    assert agree >= {"int8": 1.0, "int4": 0.75, "bf16": 0.9}[precision], agree
    if precision == "int8":
        assert torch.equal(first, old)
    steps = _prompt(24, seed=1)
    after = [(runs[0](steps[:, i : i + 1]), narrow(steps[:, i : i + 1])) for i in range(24)]
    assert runs[0].wide_passes == 1 and runs[0].length == narrow.length == keep + 24
    if precision == "int8":
        assert all(torch.equal(a, b) for a, b in after)
    assert sum(bool(a.argmax() == b.argmax()) for a, b in after) >= 0.7 * 24


@torch.inference_mode()
def test_few_row_passes_and_the_target_keep_the_kernels():
    """Chains' and trees' passes (up to MAX_TREE_NODES + 1 rows) stay under the threshold; a wide-enabled cache's pass
    of fewer rows is the kernels' own bitwise; wide.threshold(None) puts a long pass back too; the target's cache
    never goes wide."""
    assert min(WIDE, DEFAULT) > max(K_MAX, MAX_TREE_NODES) + 1
    model = _draft("int4")
    for n, limit in ((WIDE - 1, WIDE), (LONG, None)):
        ids = _prompt(n)
        with wide.threshold(limit):
            lean = LeanForward(model, wide=True)
            assert torch.equal(lean(ids, keep=n), LeanForward(model)(ids, keep=n)) and lean.wide_passes == 0
    assert wide.WIDE_ROWS == WIDE  # the block's setting undone
    target = target_cache(model, 400)
    assert isinstance(target, LeanForward) and not target.wide
    target(_prompt(LONG))
    assert target.wide_passes == 0


@torch.inference_mode()
def test_an_int4_drafter_proposes_the_same_draft_for_the_same_long_prompt():
    """One process, one prompt: the drafter's prefill runs wide, and its draft is the same every time."""
    drafter, ids = ModelDrafter(_draft("int4")), _prompt(LONG + 40, seed=2)
    greedy = SamplingParams(temperature=0.0)
    drafts = []
    for _ in range(3):
        drafter.reset()
        drafts.append(drafter.propose(ids, 8, greedy, None))
    assert drafter.lean_forward.wide_passes == 3
    assert all(torch.equal(d.tokens, drafts[0].tokens) and torch.equal(d.logits, drafts[0].logits) for d in drafts)


@pytest.mark.parametrize("precision", ["int4", "bf16"])
@torch.inference_mode()
def test_greedy_output_after_a_wide_draft_prefill_is_exactly_the_targets(precision):
    """The draft's wide prefill changes which tokens it proposes, never what the bf16 target on the kernels keeps."""
    base = tiny.build_model(None, vocab_size=300, eos=1, seed=0, layers=4, save=False)
    draft = tiny.build_model(None, vocab_size=300, eos=1, seed=0, layers=4, base=base, noise=0.5, save=False)
    target = base.to(torch.bfloat16).eval()
    assert kernel_model.make_invariant(target)
    QUANTISE[precision](draft.to(torch.bfloat16).eval())  # the target with a noisy head: agrees often, not always
    ids = _prompt(LONG, seed=4)
    drafter = ModelDrafter(draft)
    decoder = SpeculativeDecoder(target, drafter, ids, DecodeConfig(k=4, max_new_tokens=30, temperature=0.0), set())
    rounds = list(decoder)
    assert drafter.lean_forward.wide_passes == 1
    assert any(r.accepted for r in rounds) and any(r.accepted < r.k for r in rounds)
    assert decoder.new_tokens == target_greedy(target, ids, 30, set())
