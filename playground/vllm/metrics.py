"""vLLM's spec-decode counters (trace.counters.SpecCounters) as a server exposes them at /metrics in Prometheus
text. Pure: no vllm, no torch."""

from __future__ import annotations

import re

from playground.trace.counters import COUNTER_NAMES, SpecCounters

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
        name = match["name"][len("vllm:spec_decode_") : -len("_total")]
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
