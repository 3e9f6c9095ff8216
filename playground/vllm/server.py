"""vLLM as an engine beyond this machine: an OpenAI-compatible vLLM server given by URL, read through
its completions endpoint and its Prometheus `/metrics` (`vllm:spec_decode_*`), and `vllm serve` started
from vLLM's environment on localhost (tests, local runs). Imports nothing of vllm; the results are
vllm.engine's VLLMRun and trace.counters' SpecCounters, as from the worker.

Every request goes through playground.env.outbound (the allow-list, checked addresses, no redirect, one deadline per
call, Stop); an unreachable URL, a server that is not vLLM and a model it does not serve each get a PlaygroundError
that says so, never quoting what the server answered.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from playground.vllm.engine import (
    Prompt,
    Stopped,
    VLLMPromptResult,
    VLLMRun,
)
from playground.trace.counters import SpecCounters
from playground.vllm.metrics import has_vllm_metrics, parse_prometheus
from playground.env import outbound, settings
from playground.core.errors import PlaygroundError

STALL_S = 5.0  # no byte for this long ends a request (for a completion: once its answer began)
KEY_FIELD = "vLLM server API key"  # the Compare pairs tab's field, as a refusal names it

# ---------------------------------------------------------------------------------- a server


@dataclass(frozen=True)
class ServerInfo:
    url: str
    model: str  # the served model name used for requests
    models: list[str]  # every model it serves
    version: str  # vLLM's version (/version), "" when it does not say
    speculative: bool  # whether its /metrics has spec-decode counters


class VLLMServer:
    """An OpenAI-compatible vLLM server given by URL (http://host:port, with or without /v1), reached only as
    playground.env.outbound allows: a server of PLAYGROUND_VLLM_URLS (or `policy`'s), no redirect, one deadline per call
    (timeout_s for a completion, connect_timeout_s for the checks), Stop read during it. `api_key`: one the user gave
    for this server (sent to it alone, never shown); no key from the environment is ever sent."""

    def __init__(
        self,
        url: str,
        model: str | None = None,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 10.0,
        api_key: str | None = None,
        should_stop: Callable[[], bool] | None = None,
        policy: outbound.Policy | None = None,
        checked: ServerInfo | None = None,
    ) -> None:
        self.origin = outbound.parse_url(url)
        self.policy = policy if policy is not None else outbound.Policy.of(settings.read().vllm_urls)
        self.policy.admit(self.origin)  # the allow-list now; the addresses at the first request
        self.base = str(self.origin)
        self.wanted = model
        self.timeout_s, self.connect_timeout_s = timeout_s, connect_timeout_s
        if api_key:  # a CR or LF in it would add headers of the user's choosing to every request
            outbound.check_header("Authorization", f"Bearer {api_key}", KEY_FIELD)
        self._key = api_key or None
        self.should_stop = should_stop
        self._addresses: list[tuple] | None = None  # resolved and checked once: every request goes there
        self._info = checked if checked is not None and checked.url == self.base else None  # check() then asks nothing

    def __repr__(self) -> str:  # never the key
        return f"VLLMServer({self.base!r}, model={self.wanted!r})"

    # -- HTTP
    def _request(
        self, path: str, body: dict | None = None, deadline_s: float | None = None, thinks: bool = False
    ) -> tuple[int, str]:
        """(status, text) of one request within its deadline and STALL_S without a byte (`thinks`: the server may take
        the whole deadline before its answer begins: a completion); the messages say what failed, never what it
        answered."""
        headers = {"Content-Type": "application/json"} if body is not None else {}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        deadline_s = deadline_s or self.timeout_s
        try:
            if self._addresses is None:
                self._addresses = self.policy.addresses(self.origin)
            answer = outbound.request(
                self.policy,
                self.origin,
                "POST" if body is not None else "GET",
                path,
                json.dumps(body).encode() if body is not None else None,
                headers,
                deadline_s,
                self.should_stop,
                self._addresses,
                stall_s=STALL_S,
                first_byte_s=deadline_s if thinks else None,
            )
        except outbound.Stopped:
            raise Stopped("Stopped: the vLLM run was ended.") from None
        except outbound.TimedOut as exc:
            raise PlaygroundError(str(exc).replace("The server at", "The vLLM server at", 1)) from None
        except outbound.Unreachable as exc:
            raise PlaygroundError(
                f"Cannot reach a vLLM server at {self.base} ({exc.reason}). Is it running? "
                "Start one with: vllm serve MODEL --port PORT"
            ) from None
        return answer.status, answer.body.decode(errors="replace")

    def _get(self, path: str, timeout: float | None = None) -> tuple[int, str]:
        return self._request(path, None, timeout)

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
            raise PlaygroundError(
                f"The server at {self.base} is not a vLLM server: GET /v1/models answered HTTP "
                f"{status} without a list of models (an OpenAI-compatible vLLM server lists them there)."
            )
        status, metrics = self._get("/metrics", timeout=self.connect_timeout_s)
        if status != 200 or not has_vllm_metrics(metrics):
            raise PlaygroundError(
                f"The server at {self.base} is OpenAI-compatible but not vLLM: its /metrics "
                f"(HTTP {status}) has no vllm: metrics, and the playground reads vLLM's "
                "spec-decode counters there."
            )
        if self.wanted is not None and self.wanted not in models:
            raise PlaygroundError(
                f"The vLLM server at {self.base} serves {models}, not {self.wanted!r}: pick one "
                "of those, or start the server on that model."
            )
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
        status, text = self._get("/metrics", timeout=self.connect_timeout_s)  # a read, not a generation
        if status != 200:
            raise PlaygroundError(f"The vLLM server at {self.base} answered {status} for /metrics.")
        counters = parse_prometheus(text, info.model)
        if counters == SpecCounters() and info.model:  # some servers label by path: take every engine
            counters = parse_prometheus(text)
        return counters

    def tokenize(self, text: str) -> list[int] | None:
        """The server's token ids for a text (its /tokenize, no special tokens added); None when it has no
        /tokenize (not every vLLM version or proxy exposes it)."""
        info = self.check()
        body = {"model": info.model, "prompt": text, "add_special_tokens": False}
        status, answer = self._request("/tokenize", body, self.connect_timeout_s)
        if status != 200:
            return None
        try:
            return [int(t) for t in json.loads(answer)["tokens"]]
        except (ValueError, KeyError, TypeError):
            return None

    def complete(
        self,
        prompt: Prompt,
        max_tokens: int = 64,
        temperature: float = 0.0,
        seed: int = 0,
        top_p: float = 1.0,
        top_k: int = 0,
        ignore_eos: bool = False,
    ) -> VLLMPromptResult:
        """One request, timed; its counters are the /metrics difference around it (exact when it is the
        server's only request meanwhile). A str prompt goes through /v1/chat/completions (the server's
        chat template), token ids through /v1/completions."""
        info = self.check()
        body: dict = {
            "model": info.model,
            "max_tokens": int(max_tokens),
            "temperature": float(temperature),
            "top_p": float(top_p),
            "seed": int(seed),
            "ignore_eos": bool(ignore_eos),
            "repetition_penalty": 1.0,
            "return_token_ids": True,
        }
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
        status, answer = self._request(path, body, thinks=True)
        if status != 200:  # its answer is not quoted: the server's own log says why
            raise PlaygroundError(f"The vLLM server at {self.base} refused the request (HTTP {status}).")
        try:
            data = json.loads(answer)
        except ValueError:
            raise PlaygroundError(f"The vLLM server at {self.base} answered {path} with something not JSON.") from None
        wall_s = time.perf_counter() - start
        counters = self.metrics() - before
        try:
            choice = data["choices"][0]
            token_ids = [int(t) for t in choice.get("token_ids") or []]
            text = choice.get("text") if "text" in choice else choice["message"]["content"]
            prompt_ids = (
                data.get("prompt_token_ids")
                or choice.get("prompt_token_ids")
                or ([] if isinstance(prompt, str) else list(prompt))
            )
        except (KeyError, IndexError, TypeError):
            raise PlaygroundError(f"The vLLM server at {self.base} answered {path} without a completion.") from None
        return VLLMPromptResult(
            "",
            float(temperature),
            0,
            [int(t) for t in prompt_ids],
            token_ids,
            text or "",
            choice.get("finish_reason"),
            wall_s,
            None,
            counters,
        )

    def run(
        self,
        prompts: Mapping[str, Prompt],
        max_tokens: int = 64,
        temperatures: Sequence[float] = (0.0,),
        seed: int = 0,
        repeats: int = 1,
        warmup: bool = True,
        top_p: float = 1.0,
        top_k: int = 0,
        ignore_eos: bool = False,
        should_stop: Callable[[], bool] | None = None,
        label: str = "vllm server",
    ) -> VLLMRun:
        """The worker's protocol against this server: a warm-up, then every prompt alone at every temperature; Stop
        (should_stop) ends it within a request."""
        if should_stop is not None:
            self.should_stop = should_stop
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
                    results.append(
                        VLLMPromptResult(
                            str(prompt_id),
                            r.temperature,
                            repeat,
                            r.prompt_token_ids,
                            r.token_ids,
                            r.text,
                            r.finish_reason,
                            r.wall_s,
                            None,
                            r.counters,
                        )
                    )
        totals = SpecCounters()
        for r in results:
            totals = totals + r.counters
        return VLLMRun(
            label,
            results,
            totals,
            None,
            info.version,
            "server",
            {"url": info.url, "model": info.model, "speculative": info.speculative},
        )
