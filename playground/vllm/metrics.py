"""vLLM's spec-decode counters (vllm/v1/spec_decode/metrics.py), as the worker reads them from
LLM.get_metrics() and as a server exposes them at /metrics in Prometheus text. Pure: no vllm, no torch."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

COUNTER_NAMES = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


@dataclass(frozen=True)
class SpecCounters:
    """vLLM's spec-decode counters (vllm/v1/spec_decode/metrics.py) over some requests."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: tuple[int, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping) -> SpecCounters:
        return cls(
            *(int(data.get(name, 0)) for name in COUNTER_NAMES),
            tuple(int(v) for v in data.get("num_accepted_tokens_per_pos", ())),
        )

    def __add__(self, other: SpecCounters) -> SpecCounters:
        a, b = _pad(self.num_accepted_tokens_per_pos, other.num_accepted_tokens_per_pos)
        return SpecCounters(
            self.num_drafts + other.num_drafts,
            self.num_draft_tokens + other.num_draft_tokens,
            self.num_accepted_tokens + other.num_accepted_tokens,
            tuple(x + y for x, y in zip(a, b)),
        )

    def __sub__(self, other: SpecCounters) -> SpecCounters:
        a, b = _pad(self.num_accepted_tokens_per_pos, other.num_accepted_tokens_per_pos)
        return SpecCounters(
            self.num_drafts - other.num_drafts,
            self.num_draft_tokens - other.num_draft_tokens,
            self.num_accepted_tokens - other.num_accepted_tokens,
            tuple(x - y for x, y in zip(a, b)),
        )

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
        return {
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "num_accepted_tokens_per_pos": list(self.num_accepted_tokens_per_pos),
            "mean_acceptance_length": self.mean_acceptance_length,
            "draft_acceptance_rate": self.draft_acceptance_rate,
        }


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
