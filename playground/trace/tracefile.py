"""The trace as files: one row per round as CSV, the whole run as JSON (what playground.run.recorded reads back).
Every figure in them is trace/__init__.py's (trace.summarize): this module only writes them out."""

from __future__ import annotations

import json

from playground.core import theory
from playground.core.numbers import json_safe
from playground.core.records import RoundRecord
from playground.trace import Segments, frame, summarize, vllm_metrics


def to_csv(rounds: list[RoundRecord]) -> str:
    """One row per round; every list-valued field (tokens, p, q, the draft side's pieces...) as JSON."""
    df = frame(rounds)
    for col in df.columns:
        if df[col].map(lambda x: isinstance(x, (list, tuple, dict))).any():
            df[col] = df[col].map(json.dumps)
    return df.to_csv(index=False)


TRACE_FORMAT, TRACE_VERSION = "speculative-decoding-playground trace", 2  # what playground.run.recorded reads back


def to_json(
    rounds: list[RoundRecord],
    baseline: list[RoundRecord] | None = None,
    profile: theory.CostProfile | None = None,
    decoded: list | None = None,
    segments: Segments | None = None,
    **meta,
) -> str:
    """The run as JSON: meta, the summary (the same summarize as the panel: same baseline, same profile),
    the cost profile V(n) it used, the spec-decode figures under vLLM's names, every round, the target alone's
    rounds, `segments` (an interleaved comparison's rounds per segment, each side's: what its in-run figures are
    derived from) and `decoded`, the token texts the views showed (so that the run opens again with no model:
    playground.run.recorded; docs/trace.md)."""
    doc = {
        "format": TRACE_FORMAT,
        "version": TRACE_VERSION,
        **meta,
        "summary": summarize(rounds, baseline, profile, segments),
        "profile_verify_s": {str(n): s for n, s in profile.verify_s.items()} if profile else None,
        "profile_draft_s": profile.draft_s if profile else None,
        "baseline_summary": summarize(baseline) if baseline else None,
        "vllm": vllm_metrics(rounds),
        "rounds": [r.as_dict() for r in rounds],
        "baseline_rounds": [r.as_dict() for r in baseline] if baseline else None,
        "segments": [list(s) for s in segments] if segments and baseline else None,
        "decoded": decoded,
    }
    return json.dumps(json_safe(doc), indent=1)
