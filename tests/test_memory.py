"""Memory a loaded model holds: its weights, not a mapping of the file it came from (issue 18)."""

from __future__ import annotations

import sys

import pytest

from playground import models
from playground.models.cache import model_bytes
from playground.config import Precision


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
