"""A tiny random pair that vLLM's CPU build can load: playground/models/tiny.py's models have a head dimension of 16,
which vLLM's CPU attention does not support ("Unsupported CPU attention configuration: head_dim=16";
it takes 32, 64, 80, 96, 112, 128, ...); these have 32 (hidden 128, 4 heads). The draft is a noisy
copy of the target, as in tiny.build_pair. No weights are downloaded."""

from __future__ import annotations

import sys
from pathlib import Path

from playground.models import tiny


def build_pair(root: Path) -> dict[str, Path]:
    """root/vllm-target and root/vllm-draft (the target with noise on its LM head), one tokenizer."""
    root = Path(root)
    folders = {"target": root / "vllm-target", "draft": root / "vllm-draft"}
    tok = tiny.build_tokenizer(folders["target"])
    eos = tok.eos_token_id
    target = tiny.build_model(folders["target"], len(tok), eos, seed=0, hidden=128)
    tiny.build_model(folders["draft"], len(tok), eos, seed=1, base=target, noise=0.3, hidden=128)
    tok.save_pretrained(folders["draft"])
    return folders


if __name__ == "__main__":  # python -m playground.vllm.tiny DIR
    print(build_pair(Path(sys.argv[1])))
