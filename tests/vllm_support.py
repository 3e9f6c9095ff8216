"""What the vLLM tests share: the rule that they skip without vLLM's environment (or fail, under
PLAYGROUND_REQUIRE_VLLM=1, as scripts/test.sh sets it), and a vLLM request that starts in seconds."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from playground.bench.vllm import VLLMRequest, vllm_available, vllm_venv

K, MAX_TOKENS = 3, 32


def require_vllm() -> None:
    """Skip, saying why, when vLLM's environment is missing; fail instead under PLAYGROUND_REQUIRE_VLLM (not 0)."""
    if vllm_available():
        return
    reason = f"vLLM's environment is not installed at {vllm_venv()} (install it with: bash scripts/install.sh --vllm)"
    if os.environ.get("PLAYGROUND_REQUIRE_VLLM", "0") not in ("", "0"):
        pytest.fail(reason + "; PLAYGROUND_REQUIRE_VLLM is set, so the vLLM tests must run.")
    pytest.skip(reason)


def fast_request(vllm_pair: dict[str, Path], method: str, **kw) -> VLLMRequest:
    """fp32 as ours on the tiny vLLM pair; no torch.compile and (for the worker) one process: an engine starts
    in seconds, not a minute."""
    kw = dict(dict(dtype="float32", k=K, max_tokens=MAX_TOKENS, enforce_eager=True, max_model_len=512), **kw)
    return VLLMRequest(target=str(vllm_pair["target"]), draft=str(vllm_pair["draft"]), method=method, **kw)
