"""vLLM as a peer and as an engine, driven from outside: this module imports nothing of vllm.

vLLM lives in an environment of its own (scripts/install_vllm.sh; vLLM pins a transformers older than
the playground's). Two ways to run a pair on it:

- `run_worker(request, prompts)`: playground/vllm/worker.py in that environment, one engine per call,
  the prompts one at a time after a warm-up, each timed alone; JSON in and out through files.
- `vllm.server.VLLMServer(url)`: an OpenAI-compatible vLLM server already running (any size, any
  number of GPUs or nodes), read through its completions endpoint and its Prometheus `/metrics`
  (`vllm:spec_decode_*`); `vllm.serve.start_server(...)` starts `vllm serve` from the environment
  on localhost (tests, local runs).

Both give a `VLLMRun`: per prompt the output token ids, wall seconds and vLLM's spec-decode counters
(`SpecCounters`, the names of vllm/v1/spec_decode/metrics.py and of our trace's `vllm` key). vLLM
exposes no per-token verdicts: only these counters.

Every call has a timeout, every failure a PlaygroundError that says what to do: the environment is
missing (how to install it), the worker crashed or timed out (the log's last lines), a model folder is
missing or the draft and target do not share a tokenizer, a URL is unreachable, a server is not vLLM,
or it serves another model.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from enum import Enum
from typing import Any, Callable, Mapping, Sequence

from playground import decoding
from playground.core.config import DecodeConfig
from playground.env import settings
from playground.trace.counters import SpecCounters
from playground.core.errors import Ended, PlaygroundError

TARGET_ALONE = decoding.BASELINE.value  # a peer's adapter that runs the target alone (no speculative_config)

# vLLM's methods: "target" (no speculative_config) and every strategy's vLLM adapter (Strategy.vllm), registry order
METHODS = ("target",) + tuple(
    dict.fromkeys(
        s.vllm.adapter for s in decoding.REGISTRY.values() if s.vllm.adapter not in (decoding.NONE, TARGET_ALONE)
    )
)
METHOD_LABELS = {m: "vLLM " + (TARGET_ALONE if m == "target" else m.replace("_", " ")) for m in METHODS}
WORKER = Path(__file__).resolve().parent / "worker.py"
INSTALL_HINT = "bash scripts/install_vllm.sh"

# A prompt: token ids (sent as they are: encode with the target's tokenizer, as our engine does), or a
# user message (the target tokenizer's chat template applied on vLLM's side, as runner.encode_prompt does).
Prompt = Sequence[int] | str


class Stopped(Ended):
    """The caller's stop request ended a vLLM run."""


# ---------------------------------------------------------------------------------- the environment


def vllm_venv() -> Path:
    """vLLM's environment: $PLAYGROUND_VLLM_VENV, default $PLAYGROUND_CACHE/vllm-venv
    (~/.cache/spec-playground/vllm-venv), as scripts/install_vllm.sh makes it."""
    now = settings.read()
    return Path(now.vllm_venv or Path(now.cache) / "vllm-venv").expanduser()


def vllm_python(venv: Path | None = None) -> Path:
    """The environment's python; PlaygroundError (how to install it) when there is none."""
    venv = Path(venv) if venv else vllm_venv()
    python = venv / "bin" / "python"
    if not python.exists() or not (venv / "bin" / "vllm").exists():
        raise PlaygroundError(
            f"vLLM is not installed: no vLLM environment at {venv}. Install it with: {INSTALL_HINT} "
            "(or set PLAYGROUND_VLLM_VENV to a virtual environment that has vllm)."
        )
    return python


def vllm_available(venv: Path | None = None) -> bool:
    """Whether the environment exists (cheap: imports nothing)."""
    try:
        vllm_python(venv)
        return True
    except PlaygroundError:
        return False


def vllm_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment vLLM runs in: ours less what would steer its python elsewhere, loopback only,
    offline, no usage reports."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.setdefault("VLLM_HOST_IP", "127.0.0.1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class VLLMRequest:
    """One vLLM engine and how to run the prompts on it (the worker's request, docs in worker.py)."""

    target: str
    method: str = "target"  # METHODS
    draft: str | None = None  # a method whose strategy runs a draft model (Strategy.draft_model)
    dtype: str = "bfloat16"  # vLLM's name: "bfloat16", "float32", "float16", "auto"
    k: int = DecodeConfig.default("k")  # num_speculative_tokens
    options: Any = None  # the method's strategy's Options (what Peer.config adds); None: its defaults
    max_tokens: int = 64
    temperatures: tuple[float, ...] = (0.0,)
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    seed: int = 0
    repeats: int = 1
    warmup: bool = True
    ignore_eos: bool = False
    max_model_len: int = 4096
    enforce_eager: bool = False  # True: no torch.compile warm-up (starts in seconds; tests)
    kv_cache_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE
    cpu_threads_bind: str | None = None  # VLLM_CPU_OMP_THREADS_BIND; None: vLLM's "auto" (1 core of 2 here)
    draft_sample_method: str | None = None  # None: vLLM's default ("greedy" drafts); "probabilistic" as ours
    in_process: bool = False  # True: engine core and model in one process (starts ~3x faster; tests), not
    #                           vLLM's default layout (a scheduler process beside the model's)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise PlaygroundError(f"vLLM method {self.method!r}: one of {list(METHODS)}.")
        if self.drafts and not self.draft:
            raise PlaygroundError(f"vLLM's {self.method} method needs a draft folder.")
        if self.method != "target" and self.k < 1:
            raise PlaygroundError("vLLM's speculation needs k >= 1 (num_speculative_tokens).")

    @property
    def label(self) -> str:
        return METHOD_LABELS[self.method]

    @property
    def kind(self) -> Enum | None:
        """The strategy whose vLLM adapter the method is (decoding.peered); None for the target alone."""
        return None if self.method == "target" else decoding.peered("vllm", self.method)

    @property
    def drafts(self) -> bool:
        """Whether the method runs a draft model (its strategy's)."""
        return self.kind is not None and decoding.strategy(self.kind).draft_model

    @property
    def requires(self) -> tuple[str, ...]:
        """The packages the method needs in vLLM's environment (Peer.requires: the worker checks them)."""
        return () if self.kind is None else decoding.strategy(self.kind).vllm.requires

    def speculative_config(self) -> dict | None:
        """vLLM's speculative_config for this request: the registry's one builder (decoding.speculative_config),
        as the worker uses it and `vllm serve` takes it."""
        if self.kind is None:
            return None
        options = self.options if self.options is not None else decoding.strategy(self.kind).options()
        config = decoding.speculative_config(self.kind, options, self.k, self.draft)
        if config is not None and self.draft_sample_method:
            config["draft_sample_method"] = self.draft_sample_method
        return config


@dataclass(frozen=True)
class VLLMPromptResult:
    """One timed generation of one prompt."""

    id: str
    temperature: float
    repeat: int
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None
    wall_s: float  # the generate call (worker) or the HTTP request (server), prompt pass included
    ttft_s: float | None
    counters: SpecCounters

    @property
    def tokens_per_s(self) -> float:
        return len(self.token_ids) / self.wall_s if self.wall_s > 0 else float("nan")


@dataclass
class VLLMRun:
    """What one engine did: every timed generation, the counters over them, and how it was set up."""

    label: str
    results: list[VLLMPromptResult]
    totals: SpecCounters
    load_s: float | None = None
    vllm_version: str = ""
    device: str = ""
    engine: dict = field(default_factory=dict)  # the LLM(...) kwargs, or the server's URL and model

    def result(self, prompt_id: str, temperature: float = 0.0) -> VLLMPromptResult:
        """The run of a prompt at a temperature with the median wall time over its repeats."""
        runs = [r for r in self.results if r.id == prompt_id and r.temperature == temperature]
        if not runs:
            raise KeyError((prompt_id, temperature))
        runs.sort(key=lambda r: r.wall_s)
        return runs[(len(runs) - 1) // 2]

    def tokens_per_s(self, prompt_id: str, temperature: float = 0.0) -> float:
        """Median tok/s of a prompt over its repeats."""
        return statistics.median(
            r.tokens_per_s for r in self.results if r.id == prompt_id and r.temperature == temperature
        )

    def counters(self, prompt_id: str | None = None, temperature: float | None = None) -> SpecCounters:
        """The counters summed over the runs of a prompt and/or temperature (all when None)."""
        total = SpecCounters()
        for r in self.results:
            if (prompt_id is None or r.id == prompt_id) and (temperature is None or r.temperature == temperature):
                total = total + r.counters
        return total

    def to_dict(self) -> dict:
        out = asdict(self)
        out["totals"] = self.totals.as_dict()
        for r, d in zip(self.results, out["results"]):
            d["counters"] = r.counters.as_dict()
            d["tokens_per_s"] = r.tokens_per_s
        return out


def _prompt_payload(prompts: Mapping[str, Prompt]) -> list[dict]:
    if not prompts:
        raise PlaygroundError("vLLM: no prompts to run.")
    out = []
    for prompt_id, prompt in prompts.items():
        if isinstance(prompt, str):
            out.append({"id": str(prompt_id), "chat": prompt})
        else:
            out.append({"id": str(prompt_id), "token_ids": [int(t) for t in prompt]})
    return out


# ---------------------------------------------------------------------------------- the worker


def default_timeout(request: VLLMRequest, prompts: int) -> float:
    """Generous: 10 minutes to start (loading and torch.compile of a 1.5B model take minutes on 2 busy
    cores), then a second per token to generate."""
    tokens = request.max_tokens * prompts * len(request.temperatures) * request.repeats
    return 600.0 + tokens


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    keep = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(keep)


def stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """End the process and every process of its group (the engine processes it spawned): SIGTERM, a grace
    period, then SIGKILL for whatever is left, also when the leader has already exited (its engine
    processes may not have)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _call_worker(
    payload: dict,
    timeout_s: float,
    should_stop: Callable[[], bool] | None = None,
    venv: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> dict:
    python = vllm_python(venv)
    work = Path(tempfile.mkdtemp(prefix="playground-vllm-"))
    try:
        request_path, result_path, log_path = work / "request.json", work / "result.json", work / "worker.log"
        request_path.write_text(json.dumps(payload))
        with open(log_path, "wb") as log:
            # -P: the script's folder (playground/) must not shadow the standard library in vLLM's python
            proc = subprocess.Popen(
                [str(python), "-P", str(WORKER), str(request_path), str(result_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=vllm_env(env),
                start_new_session=True,
                cwd=work,
            )
            deadline = time.monotonic() + timeout_s
            try:
                while proc.poll() is None:
                    if should_stop is not None and should_stop():
                        stop_group(proc)
                        raise Stopped("Stopped: the vLLM run was ended.")
                    if time.monotonic() > deadline:
                        stop_group(proc)
                        raise PlaygroundError(
                            f"vLLM did not finish in {timeout_s:.0f} s and was stopped. Its log ends with:\n"
                            + tail(log_path)
                        )
                    time.sleep(0.2)
            finally:
                stop_group(proc)  # engine processes left behind by a worker that has exited
        if not result_path.exists():
            code = proc.returncode
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            raise PlaygroundError(
                f"vLLM's worker {how} without a result (a crash). Its log ends with:\n" + tail(log_path)
            )
        result = json.loads(result_path.read_text())
        if not result.get("ok"):
            kind, message = result.get("error", "crash"), result.get("message", "")
            if kind == "crash":
                raise PlaygroundError(f"vLLM failed: {message}\nIts log ends with:\n{tail(log_path, 12)}")
            raise PlaygroundError(f"vLLM: {message}")
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def probe(timeout_s: float = 180.0, venv: Path | None = None) -> dict:
    """The environment's versions and speculative features, no model loaded: {"vllm_version",
    "torch_version", "transformers_version", "device", "features": {"methods": [...], "arctic_inference": bool}}."""
    return _call_worker({"action": "probe"}, timeout_s, venv=venv)


def run_worker(
    request: VLLMRequest,
    prompts: Mapping[str, Prompt],
    timeout_s: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    venv: Path | None = None,
) -> VLLMRun:
    """Start one vLLM engine in its environment, warm it up, run every prompt alone at every
    temperature (greedy is temperature 0), return what it did. `should_stop()` is polled while it
    runs: True ends it (Stopped)."""
    vllm_python(venv)  # first: without vLLM nothing else matters
    for role, folder in (("target", request.target), ("draft", request.draft)):
        if folder is not None and not (Path(folder) / "config.json").is_file():
            raise PlaygroundError(f"vLLM: the {role} folder {folder!r} has no config.json (not a model folder).")
    payload = {
        "target": str(request.target),
        "dtype": request.dtype,
        "speculative_config": request.speculative_config(),
        "requires": list(request.requires),
        "prompts": _prompt_payload(prompts),
        "max_tokens": request.max_tokens,
        "temperatures": list(request.temperatures),
        "top_p": request.top_p,
        "top_k": request.top_k,
        "seed": request.seed,
        "repeats": request.repeats,
        "warmup": request.warmup,
        "ignore_eos": request.ignore_eos,
        "max_model_len": request.max_model_len,
        "enforce_eager": request.enforce_eager,
        "kv_cache_gib": request.kv_cache_gib,
        "cpu_threads_bind": request.cpu_threads_bind,
        "in_process": request.in_process,
    }
    timeout = timeout_s if timeout_s is not None else default_timeout(request, len(prompts))
    result = _call_worker(payload, timeout, should_stop, venv)
    results = [
        VLLMPromptResult(
            r["id"],
            float(r["temperature"]),
            int(r["repeat"]),
            r["prompt_token_ids"],
            r["token_ids"],
            r["text"],
            r.get("finish_reason"),
            float(r["wall_s"]),
            r.get("ttft_s"),
            SpecCounters.from_dict(r["counters"]),
        )
        for r in result["results"]
    ]
    return VLLMRun(
        request.label,
        results,
        SpecCounters.from_dict(result["totals"]),
        result.get("load_s"),
        result.get("vllm_version", ""),
        result.get("device", ""),
        dict(result.get("engine_kwargs", {}), env=result.get("env", {})),
    )
