"""Memory a loaded model holds: its weights, not a mapping of the file it came from (issue 18)."""

from __future__ import annotations

import sys

import pytest

from playground import models
from playground.models.cache import model_bytes
from playground.core.config import Precision


def mapped(path_part: str) -> int:
    """Resident kB of this process's mappings whose file path contains path_part (Linux /proc)."""
    total, current = 0, ""
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            parts = line.split()
            if line[0].isdigit() or line[0] in "abcdef" and "-" in parts[0]:
                current = parts[5] if len(parts) > 5 else ""
            elif parts[0] == "Rss:" and path_part in current:
                total += int(parts[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
@pytest.mark.parametrize("precision", [Precision.FP32, Precision.INT8])
def test_a_loaded_model_keeps_no_mapping_of_its_weights_file(tiny_models, precision):
    folder = tiny_models["target"]
    model, _ = models.load_model(str(folder), precision=precision)
    weights = str(folder / "model.safetensors")
    assert mapped(weights) == 0, "the safetensors file is still mapped: its pages stay resident"
    assert model_bytes(model) > 0


def held_bytes(model) -> int:
    """Bytes of the distinct storages the model holds: its parameters and buffers, and the kernels' projections
    (kernels.model: the stacked q/k/v and gate/up, the int8 copies), each storage once."""
    from playground.kernels.model import _procs

    tensors = [*model.parameters(), *model.buffers()]
    for module in model.modules():
        for proj in _procs(module):
            tensors += [
                t for n in ("weight", "q", "scale", "rowsum", "bias") if (t := getattr(proj, n, None)) is not None
            ]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors if t.numel()}
    return sum(storages.values())


@pytest.mark.parametrize("precision", [Precision.BF16, Precision.INT8])
def test_the_weights_are_held_once(tiny_models, precision):
    """The bf16 target on the kernels (q/k/v and gate/up stacked) and the int8 draft: what the model holds is what
    model_bytes counts, not twice its weights (a copy of each Linear kept beside the stacked one)."""
    from playground.kernels import model as kernel_model

    model, _ = models.load_model(str(tiny_models["target"]), precision=precision)
    if precision is Precision.BF16 and not kernel_model.is_invariant(model):
        pytest.skip("the batch-invariant kernels do not run on this CPU")
    if precision is Precision.INT8 and not hasattr(model, "_int8_bytes"):
        pytest.skip("the int8 kernels do not run on this CPU")
    assert held_bytes(model) <= model_bytes(model) * 1.01
    assert model_bytes(model) <= held_bytes(model) * 1.05  # and model_bytes counts what is held
