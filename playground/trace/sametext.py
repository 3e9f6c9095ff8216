"""The same-text check: a greedy speculative output against the target alone's, the first difference and whether a
near-tie (the target's top-2 logit gap under what the precision's rounding can flip) explains it. Pure functions,
no model."""

from __future__ import annotations

import math

from playground.core.records import RoundRecord


def as_rounds(tokens: list[int], margins: list[float] = ()) -> list[RoundRecord]:
    """An output that has no rounds of its own (HF's generate, a batch row) as one record: what
    compare_outputs reads (new_tokens and margins)."""
    return [
        RoundRecord(
            round=0,
            k=0,
            draft_tokens=[],
            accepted=0,
            token=tokens[-1] if tokens else -1,
            token_kind="target",
            new_tokens=list(tokens),
            draft_s=0.0,
            verify_s=0.0,
            total_new=len(tokens),
            margins=list(margins),
        )
    ]


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ (a prefix of the other counts at its end), None if equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def margin_at(rounds: list[RoundRecord], position: int) -> float:
    """The target's top-1 minus top-2 logit when it chose output token `position` (nan if not recorded)."""
    margins = [m for r in rounds for m in (r.margins + [float("nan")] * (len(r.new_tokens) - len(r.margins)))]
    return margins[position] if 0 <= position < len(margins) else float("nan")


def near_tie_tolerance(precision: str, exact: bool = False) -> float:
    """The logit gap under which two computations of the same position may pick different tokens:
    bf16 keeps 8 significant bits, fp16 11, fp32 24; logits of ~10-30 then round by ~0.1 (bf16),
    ~0.01 (fp16) and ~1e-6 (fp32), and sums of many such roundings differ by several times that
    between a pass of k + 1 tokens and a pass of 1. Measured flips: docs/levers.md. exact: the target ran
    batch-invariant kernels (a position's logits the same in every pass): no gap excuses a difference."""
    if exact:
        return 0.0
    return {"bf16": 0.5, "fp16": 0.1, "int8": 0.5}.get(str(precision), 1e-3)


def compare_outputs(
    spec_rounds: list[RoundRecord], base_rounds: list[RoundRecord], precision: str, exact: bool = False
) -> dict:
    """Greedy speculative output against the target alone's: {"equal", "position", "gap_spec", "gap_base",
    "near_tie"}. The promise in low precision: identical, except where a near-tie (both computations'
    top-2 gap under near_tie_tolerance) flipped; after a flip the texts continue from different
    prefixes and are not compared further. exact (batch-invariant kernels): identical, no near-tie allowed."""
    a = [t for r in spec_rounds for t in r.new_tokens]
    b = [t for r in base_rounds for t in r.new_tokens]
    at = first_difference(a, b)
    if at is None:
        return {"equal": True, "position": None, "gap_spec": float("nan"), "gap_base": float("nan"), "near_tie": False}
    gap_a, gap_b = margin_at(spec_rounds, at), margin_at(base_rounds, at)
    known = [g for g in (gap_a, gap_b) if not math.isnan(g)]
    near = bool(known) and min(known) <= near_tie_tolerance(precision, exact) and not exact
    return {"equal": False, "position": at, "gap_spec": gap_a, "gap_base": gap_b, "near_tie": near}
