"""What the vLLM tests share: the rule that they skip without vLLM's environment (or fail, under
PLAYGROUND_REQUIRE_VLLM=1, as scripts/test.sh sets it), a vLLM request that starts in seconds, and a server on
localhost that is not vLLM."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import threading
from pathlib import Path
from typing import Iterator

import pytest

from playground.vllm.engine import VLLMRequest, vllm_available, vllm_venv

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


class _NotVLLM(http.server.BaseHTTPRequestHandler):
    openai = False  # True: answer /v1/models like an OpenAI-compatible server that is not vLLM

    def do_GET(self):  # noqa: N802 - the stdlib's name
        if self.openai and self.path == "/v1/models":
            body, status = json.dumps({"object": "list", "data": [{"id": "tiny"}]}).encode(), 200
        elif self.openai and self.path == "/metrics":
            body, status = b"python_gc_objects_collected_total 1.0\n", 200
        else:
            body, status = b"<html>not here</html>", 404
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def not_vllm_server(openai: bool) -> Iterator[str]:
    """The URL of an HTTP server on localhost that is not vLLM: a plain one (404 everywhere), or with openai an
    OpenAI-compatible one (it lists a model) whose /metrics has no vllm: metrics."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_NotVLLM,), {"openai": openai}))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
