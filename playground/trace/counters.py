"""Spec-decode counters under vLLM's names (vllm/v1/spec_decode/metrics.py): ours from trace.vllm_metrics, vLLM's
from its worker or a server's /metrics (vllm.metrics.parse_prometheus). Below bench/ and vllm/ both: a benchmark row
(trace.results.Result) carries them as a dict, and both sides read them through SpecCounters. Pure."""

from __future__ import annotations

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
