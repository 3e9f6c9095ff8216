"""vLLM as a peer and as an engine, driven from outside: this module imports nothing of vllm.

vLLM lives in an environment of its own (scripts/install_vllm.sh; vLLM pins a transformers older than
the playground's). Two ways to run a pair on it:

- `run_worker(request, prompts)`: playground/vllm_worker.py in that environment, one engine per call,
  the prompts one at a time after a warm-up, each timed alone; JSON in and out through files.
- `VLLMServer(url)`: an OpenAI-compatible vLLM server already running (any size, any number of GPUs or
  nodes), read through its completions endpoint and its Prometheus `/metrics` (`vllm:spec_decode_*`).
  `start_server(...)` starts `vllm serve` from the environment on localhost (tests, local runs).

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
import re
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from playground.errors import PlaygroundError

METHODS = ("target", "draft_model", "ngram", "suffix")  # vLLM's names; "target": no speculative_config
METHOD_LABELS = {"target": "vllm target alone", "draft_model": "vllm draft model", "ngram": "vllm ngram",
                 "suffix": "vllm suffix"}
WORKER = Path(__file__).resolve().parents[1] / "vllm_worker.py"
INSTALL_HINT = "bash scripts/install_vllm.sh"
COUNTER_NAMES = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")

# A prompt: token ids (sent as they are: encode with the target's tokenizer, as our engine does), or a
# user message (the target tokenizer's chat template applied on vLLM's side, as runner.encode_prompt does).
Prompt = Sequence[int] | str


class Stopped(PlaygroundError):
    """The caller's stop request ended a vLLM run."""


# ---------------------------------------------------------------------------------- the environment


def vllm_venv() -> Path:
    """vLLM's environment: $PLAYGROUND_VLLM_VENV, default $PLAYGROUND_CACHE/vllm-venv
    (~/.cache/spec-playground/vllm-venv), as scripts/install_vllm.sh makes it."""
    if os.environ.get("PLAYGROUND_VLLM_VENV"):
        return Path(os.environ["PLAYGROUND_VLLM_VENV"]).expanduser()
    cache = os.environ.get("PLAYGROUND_CACHE") or Path.home() / ".cache" / "spec-playground"
    return Path(cache).expanduser() / "vllm-venv"


def vllm_python(venv: Path | None = None) -> Path:
    """The environment's python; PlaygroundError (how to install it) when there is none."""
    venv = Path(venv) if venv else vllm_venv()
    python = venv / "bin" / "python"
    if not python.exists() or not (venv / "bin" / "vllm").exists():
        raise PlaygroundError(
            f"vLLM is not installed: no vLLM environment at {venv}. Install it with: {INSTALL_HINT} "
            "(or set PLAYGROUND_VLLM_VENV to a virtual environment that has vllm).")
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


# ---------------------------------------------------------------------------------- counters


@dataclass(frozen=True)
class SpecCounters:
    """vLLM's spec-decode counters (vllm/v1/spec_decode/metrics.py) over some requests."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: tuple[int, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping) -> SpecCounters:
        return cls(*(int(data.get(name, 0)) for name in COUNTER_NAMES),
                   tuple(int(v) for v in data.get("num_accepted_tokens_per_pos", ())))

    def __add__(self, other: SpecCounters) -> SpecCounters:
        a, b = _pad(self.num_accepted_tokens_per_pos, other.num_accepted_tokens_per_pos)
        return SpecCounters(self.num_drafts + other.num_drafts, self.num_draft_tokens + other.num_draft_tokens,
                            self.num_accepted_tokens + other.num_accepted_tokens,
                            tuple(x + y for x, y in zip(a, b)))

    def __sub__(self, other: SpecCounters) -> SpecCounters:
        a, b = _pad(self.num_accepted_tokens_per_pos, other.num_accepted_tokens_per_pos)
        return SpecCounters(self.num_drafts - other.num_drafts, self.num_draft_tokens - other.num_draft_tokens,
                            self.num_accepted_tokens - other.num_accepted_tokens,
                            tuple(x - y for x, y in zip(a, b)))

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted / drafts: tokens per draft round, the target's own token included (vLLM's convention)."""
        return 1 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else float("nan")

    @property
    def draft_acceptance_rate(self) -> float:
        """accepted / drafted, a fraction (vLLM logs it as a percentage)."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else float("nan")

    @property
    def acceptance_by_position(self) -> list[float]:
        """accepted at draft position i / drafts: vLLM's per-position acceptance rate."""
        return [n / self.num_drafts for n in self.num_accepted_tokens_per_pos] if self.num_drafts else []

    def as_dict(self) -> dict:
        """Under the names of our trace's `vllm` key (trace.vllm_metrics, docs/trace.md)."""
        return {"num_drafts": self.num_drafts, "num_draft_tokens": self.num_draft_tokens,
                "num_accepted_tokens": self.num_accepted_tokens,
                "num_accepted_tokens_per_pos": list(self.num_accepted_tokens_per_pos),
                "mean_acceptance_length": self.mean_acceptance_length,
                "draft_acceptance_rate": self.draft_acceptance_rate}


def _pad(a: Sequence[int], b: Sequence[int]) -> tuple[list[int], list[int]]:
    n = max(len(a), len(b))
    return list(a) + [0] * (n - len(a)), list(b) + [0] * (n - len(b))


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str, model: str | None = None) -> SpecCounters:
    """The `vllm:spec_decode_*` counters in Prometheus text (a vLLM server's /metrics), summed over
    engines; only the samples labelled with `model` (model_name) when given. Zeros when the server
    does not speculate (it then has no such counters)."""
    counts = dict.fromkeys(COUNTER_NAMES, 0.0)
    per_pos: dict[int, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or not match["name"].startswith("vllm:spec_decode_") or not match["name"].endswith("_total"):
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        if model is not None and labels.get("model_name", model) != model:
            continue
        name = match["name"][len("vllm:spec_decode_"):-len("_total")]
        value = float(match["value"])
        if name in counts:
            counts[name] += value
        elif name == "num_accepted_tokens_per_pos" and "position" in labels:
            per_pos[int(labels["position"])] = per_pos.get(int(labels["position"]), 0.0) + value
    positions = tuple(int(per_pos.get(i, 0)) for i in range(max(per_pos) + 1)) if per_pos else ()
    return SpecCounters(*(int(counts[n]) for n in COUNTER_NAMES), positions)


def has_vllm_metrics(text: str) -> bool:
    """Whether Prometheus text comes from vLLM (its metrics are all named vllm:...)."""
    return any(line.startswith("vllm:") for line in text.splitlines())


# ---------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class VLLMRequest:
    """One vLLM engine and how to run the prompts on it (the worker's request, docs in vllm_worker.py)."""

    target: str
    method: str = "target"  # METHODS
    draft: str | None = None  # method "draft_model"
    dtype: str = "bfloat16"  # vLLM's name: "bfloat16", "float32", "float16", "auto"
    k: int = 4  # num_speculative_tokens
    prompt_lookup_max: int = 3  # ngram
    prompt_lookup_min: int = 1
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

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise PlaygroundError(f"vLLM method {self.method!r}: one of {list(METHODS)}.")
        if self.method == "draft_model" and not self.draft:
            raise PlaygroundError("vLLM's draft-model method needs a draft folder.")
        if self.method != "target" and self.k < 1:
            raise PlaygroundError("vLLM's speculation needs k >= 1 (num_speculative_tokens).")

    @property
    def label(self) -> str:
        return METHOD_LABELS[self.method]

    def speculative_config(self) -> dict | None:
        """vLLM's speculative_config for this request (as the worker builds it; for `vllm serve`)."""
        config: dict | None
        if self.method == "target":
            return None
        if self.method == "draft_model":
            config = {"method": "draft_model", "model": self.draft, "num_speculative_tokens": self.k}
        elif self.method == "ngram":
            config = {"method": "ngram", "num_speculative_tokens": self.k,
                      "prompt_lookup_max": self.prompt_lookup_max, "prompt_lookup_min": self.prompt_lookup_min}
        else:
            config = {"method": "suffix", "num_speculative_tokens": self.k}
        if self.draft_sample_method:
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
        return statistics.median(r.tokens_per_s for r in self.results
                                 if r.id == prompt_id and r.temperature == temperature)

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
    """Generous: 5 minutes to start (a first torch.compile of a 1.5B model takes about one), then a
    second per token to generate (a 1.5B model on 2 busy cores makes 5 or more a second)."""
    tokens = request.max_tokens * prompts * len(request.temperatures) * request.repeats
    return 300.0 + tokens


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    keep = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(keep)


def _stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """End the process and the engine processes it spawned (its own process group)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _call_worker(payload: dict, timeout_s: float, should_stop: Callable[[], bool] | None = None,
                 venv: Path | None = None, env: Mapping[str, str] | None = None) -> dict:
    python = vllm_python(venv)
    work = Path(tempfile.mkdtemp(prefix="playground-vllm-"))
    try:
        request_path, result_path, log_path = work / "request.json", work / "result.json", work / "worker.log"
        request_path.write_text(json.dumps(payload))
        with open(log_path, "wb") as log:
            # -P: the script's folder (playground/) must not shadow the standard library in vLLM's python
            proc = subprocess.Popen([str(python), "-P", str(WORKER), str(request_path), str(result_path)],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=vllm_env(env), start_new_session=True, cwd=work)
            deadline = time.monotonic() + timeout_s
            try:
                while proc.poll() is None:
                    if should_stop is not None and should_stop():
                        _stop_group(proc)
                        raise Stopped("Stopped: the vLLM run was ended.")
                    if time.monotonic() > deadline:
                        _stop_group(proc)
                        raise PlaygroundError(
                            f"vLLM did not finish in {timeout_s:.0f} s and was stopped. Its log ends with:\n"
                            + _tail(log_path))
                    time.sleep(0.2)
            finally:
                _stop_group(proc)  # engine processes left behind by a worker that has exited
        if not result_path.exists():
            code = proc.returncode
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            raise PlaygroundError(f"vLLM's worker {how} without a result (a crash). Its log ends with:\n"
                                  + _tail(log_path))
        result = json.loads(result_path.read_text())
        if not result.get("ok"):
            kind, message = result.get("error", "crash"), result.get("message", "")
            if kind == "crash":
                raise PlaygroundError(f"vLLM failed: {message}\nIts log ends with:\n{_tail(log_path, 12)}")
            raise PlaygroundError(f"vLLM: {message}")
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def probe(timeout_s: float = 180.0, venv: Path | None = None) -> dict:
    """The environment's versions and speculative features, no model loaded: {"vllm_version",
    "torch_version", "transformers_version", "device", "features": {"methods": [...], "suffix": bool}}."""
    return _call_worker({"action": "probe"}, timeout_s, venv=venv)


def run_worker(request: VLLMRequest, prompts: Mapping[str, Prompt], timeout_s: float | None = None,
               should_stop: Callable[[], bool] | None = None, venv: Path | None = None) -> VLLMRun:
    """Start one vLLM engine in its environment, warm it up, run every prompt alone at every
    temperature (greedy is temperature 0), return what it did. `should_stop()` is polled while it
    runs: True ends it (Stopped)."""
    for role, folder in (("target", request.target), ("draft", request.draft)):
        if folder is not None and not (Path(folder) / "config.json").is_file():
            raise PlaygroundError(f"vLLM: the {role} folder {folder!r} has no config.json (not a model folder).")
    payload = {"target": str(request.target), "draft": str(request.draft) if request.draft else None,
               "dtype": request.dtype, "method": request.method, "k": request.k,
               "prompt_lookup_max": request.prompt_lookup_max, "prompt_lookup_min": request.prompt_lookup_min,
               "prompts": _prompt_payload(prompts), "max_tokens": request.max_tokens,
               "temperatures": list(request.temperatures), "top_p": request.top_p, "top_k": request.top_k,
               "seed": request.seed, "repeats": request.repeats, "warmup": request.warmup,
               "ignore_eos": request.ignore_eos, "max_model_len": request.max_model_len,
               "enforce_eager": request.enforce_eager, "kv_cache_gib": request.kv_cache_gib,
               "cpu_threads_bind": request.cpu_threads_bind, "draft_sample_method": request.draft_sample_method}
    timeout = timeout_s if timeout_s is not None else default_timeout(request, len(prompts))
    result = _call_worker(payload, timeout, should_stop, venv)
    results = [VLLMPromptResult(r["id"], float(r["temperature"]), int(r["repeat"]), r["prompt_token_ids"],
                                r["token_ids"], r["text"], r.get("finish_reason"), float(r["wall_s"]),
                                r.get("ttft_s"), SpecCounters.from_dict(r["counters"]))
               for r in result["results"]]
    return VLLMRun(request.label, results, SpecCounters.from_dict(result["totals"]), result.get("load_s"),
                   result.get("vllm_version", ""), result.get("device", ""),
                   dict(result.get("engine_kwargs", {}), env=result.get("env", {})))


# ---------------------------------------------------------------------------------- a server


@dataclass(frozen=True)
class ServerInfo:
    url: str
    model: str  # the served model name used for requests
    models: list[str]  # every model it serves
    version: str  # vLLM's version (/version), "" when it does not say
    speculative: bool  # whether its /metrics has spec-decode counters


class VLLMServer:
    """An OpenAI-compatible vLLM server given by URL (http://host:port, with or without /v1)."""

    def __init__(self, url: str, model: str | None = None, timeout_s: float = 120.0,
                 connect_timeout_s: float = 10.0, api_key: str | None = None) -> None:
        url = (url or "").strip().rstrip("/")
        if not re.match(r"^https?://[^/\s]+", url):
            raise PlaygroundError(f"vLLM server URL {url!r}: give it as http://host:port.")
        self.base = url[:-3] if url.endswith("/v1") else url
        self.wanted = model
        self.timeout_s, self.connect_timeout_s = timeout_s, connect_timeout_s
        self.api_key = api_key or os.environ.get("VLLM_API_KEY") or None
        self._info: ServerInfo | None = None

    # -- HTTP
    def _open(self, path: str, body: dict | None = None, timeout: float | None = None):
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=headers)
        return urllib.request.urlopen(req, timeout=timeout or self.timeout_s)  # noqa: S310 - user's own URL

    def _get(self, path: str, timeout: float | None = None) -> tuple[int, str]:
        try:
            with self._open(path, timeout=timeout) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, (socket.timeout, TimeoutError)) or isinstance(exc, (socket.timeout, TimeoutError)):
                raise PlaygroundError(f"The vLLM server at {self.base} did not answer {path} within "
                                      f"{timeout or self.timeout_s:.0f} s.") from None
            raise PlaygroundError(f"Cannot reach a vLLM server at {self.base} ({reason}). Is it running? "
                                  "Start one with: vllm serve MODEL --port PORT") from None

    # -- checks
    def check(self) -> ServerInfo:
        """Reachable, OpenAI-compatible, vLLM (its /metrics has vllm: metrics), serving the model."""
        if self._info is not None:
            return self._info
        status, text = self._get("/v1/models", timeout=self.connect_timeout_s)
        try:
            models = [m["id"] for m in json.loads(text)["data"]] if status == 200 else None
        except (ValueError, KeyError, TypeError):
            models = None
        if models is None:
            raise PlaygroundError(f"The server at {self.base} is not a vLLM server: GET /v1/models answered "
                                  f"{status} {text[:120]!r} (an OpenAI-compatible vLLM server lists its models there).")
        status, metrics = self._get("/metrics", timeout=self.connect_timeout_s)
        if status != 200 or not has_vllm_metrics(metrics):
            raise PlaygroundError(f"The server at {self.base} is OpenAI-compatible but not vLLM: its /metrics "
                                  f"(HTTP {status}) has no vllm: metrics, and the playground reads vLLM's "
                                  "spec-decode counters there.")
        if self.wanted is not None and self.wanted not in models:
            raise PlaygroundError(f"The vLLM server at {self.base} serves {models}, not {self.wanted!r}: pick one "
                                  "of those, or start the server on that model.")
        if self.wanted is None and len(models) != 1:
            raise PlaygroundError(f"The vLLM server at {self.base} serves {models}: name the model to use.")
        status, text = self._get("/version", timeout=self.connect_timeout_s)
        try:
            version = str(json.loads(text).get("version", "")) if status == 200 else ""
        except (ValueError, AttributeError):
            version = ""
        model = self.wanted or models[0]
        spec = any(line.startswith("vllm:spec_decode_") for line in metrics.splitlines())
        self._info = ServerInfo(self.base, model, models, version, spec)
        return self._info

    def metrics(self) -> SpecCounters:
        """The server's spec-decode counters now (cumulative since it started)."""
        info = self.check()
        status, text = self._get("/metrics")
        if status != 200:
            raise PlaygroundError(f"The vLLM server at {self.base} answered {status} for /metrics.")
        counters = parse_prometheus(text, info.model)
        if counters == SpecCounters() and info.model:  # some servers label by path: take every engine
            counters = parse_prometheus(text)
        return counters

    def complete(self, prompt: Prompt, max_tokens: int = 64, temperature: float = 0.0, seed: int = 0,
                 top_p: float = 1.0, top_k: int = 0, ignore_eos: bool = False) -> VLLMPromptResult:
        """One request, timed; its counters are the /metrics difference around it (exact when it is the
        server's only request meanwhile). A str prompt goes through /v1/chat/completions (the server's
        chat template), token ids through /v1/completions."""
        info = self.check()
        body: dict = {"model": info.model, "max_tokens": int(max_tokens), "temperature": float(temperature),
                      "top_p": float(top_p), "seed": int(seed), "ignore_eos": bool(ignore_eos),
                      "repetition_penalty": 1.0, "return_token_ids": True}
        if top_k > 0:  # off by default; older vLLM servers spell "off" -1, newer 0: send neither
            body["top_k"] = int(top_k)
        if isinstance(prompt, str):
            path = "/v1/chat/completions"
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            path = "/v1/completions"
            body["prompt"] = [int(t) for t in prompt]
        before = self.metrics()
        start = time.perf_counter()
        try:
            with self._open(path, body) as response:
                data = json.loads(response.read().decode())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise PlaygroundError(f"The vLLM server at {self.base} refused the request ({exc.code}): {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise PlaygroundError(f"The vLLM server at {self.base} did not complete the request within "
                                  f"{self.timeout_s:.0f} s, or dropped it ({getattr(exc, 'reason', exc)}).") from None
        except ValueError:
            raise PlaygroundError(f"The vLLM server at {self.base} answered {path} with something not JSON.") from None
        wall_s = time.perf_counter() - start
        counters = self.metrics() - before
        try:
            choice = data["choices"][0]
            token_ids = [int(t) for t in choice.get("token_ids") or []]
            text = choice.get("text") if "text" in choice else choice["message"]["content"]
            prompt_ids = data.get("prompt_token_ids") or choice.get("prompt_token_ids") or (
                [] if isinstance(prompt, str) else list(prompt))
        except (KeyError, IndexError, TypeError):
            raise PlaygroundError(f"The vLLM server at {self.base} answered {path} without a completion: "
                                  f"{str(data)[:200]}") from None
        return VLLMPromptResult("", float(temperature), 0, [int(t) for t in prompt_ids], token_ids, text or "",
                                choice.get("finish_reason"), wall_s, None, counters)

    def run(self, prompts: Mapping[str, Prompt], max_tokens: int = 64, temperatures: Sequence[float] = (0.0,),
            seed: int = 0, repeats: int = 1, warmup: bool = True, top_p: float = 1.0, top_k: int = 0,
            ignore_eos: bool = False, should_stop: Callable[[], bool] | None = None,
            label: str = "vllm server") -> VLLMRun:
        """The worker's protocol against this server: a warm-up, then every prompt alone at every temperature."""
        info = self.check()
        items = list(prompts.items())
        if not items:
            raise PlaygroundError("vLLM: no prompts to run.")
        if warmup:
            for temperature in temperatures:
                self.complete(items[0][1], min(8, max_tokens), temperature, seed, top_p, top_k)
        results = []
        for temperature in temperatures:
            for prompt_id, prompt in items:
                for repeat in range(repeats):
                    if should_stop is not None and should_stop():
                        raise Stopped("Stopped: the vLLM run was ended.")
                    r = self.complete(prompt, max_tokens, temperature, seed, top_p, top_k, ignore_eos)
                    results.append(VLLMPromptResult(str(prompt_id), r.temperature, repeat, r.prompt_token_ids,
                                                    r.token_ids, r.text, r.finish_reason, r.wall_s, None,
                                                    r.counters))
        totals = SpecCounters()
        for r in results:
            totals = totals + r.counters
        return VLLMRun(label, results, totals, None, info.version, "server",
                       {"url": info.url, "model": info.model, "speculative": info.speculative})


# ---------------------------------------------------------------------------------- vllm serve


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_command(request: VLLMRequest, port: int, served_name: str | None = None,
                  venv: Path | None = None) -> list[str]:
    """`vllm serve` for a request's engine on 127.0.0.1:port (the generation config vLLM's neutral one,
    as in the worker)."""
    python = vllm_python(venv)
    command = [str(python.parent / "vllm"), "serve", str(request.target), "--host", "127.0.0.1", "--port", str(port),
               "--dtype", request.dtype, "--max-model-len", str(request.max_model_len), "--seed", str(request.seed),
               "--generation-config", "vllm"]
    if served_name:
        command += ["--served-model-name", served_name]
    if request.enforce_eager:
        command.append("--enforce-eager")
    config = request.speculative_config()
    if config is not None:
        command += ["--speculative-config", json.dumps(config)]
    return command


@contextlib.contextmanager
def start_server(request: VLLMRequest, port: int | None = None, served_name: str | None = None,
                 timeout_s: float = 300.0, venv: Path | None = None,
                 log_path: Path | None = None) -> Iterator[VLLMServer]:
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
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=vllm_env(env), start_new_session=True)
    try:
        server = VLLMServer(f"http://127.0.0.1:{port}", served_name or str(request.target), timeout_s=timeout_s,
                            connect_timeout_s=5.0)
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise PlaygroundError(f"`vllm serve` exited with code {proc.returncode} before it was ready. "
                                      f"Its log ends with:\n{_tail(log_path)}")
            try:
                server.check()
                break
            except PlaygroundError:
                if time.monotonic() > deadline:
                    raise PlaygroundError(f"`vllm serve` was not ready in {timeout_s:.0f} s. Its log ends with:\n"
                                          + _tail(log_path)) from None
                time.sleep(1.0)
        yield server
    finally:
        _stop_group(proc, grace_s=20.0)
        if own_log:
            with contextlib.suppress(OSError):
                log_path.unlink()
