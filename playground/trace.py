"""Round records -> a DataFrame, a summary, CSV and JSON. Pure functions, no model."""
from __future__ import annotations

import json
import math
from dataclasses import asdict

import pandas as pd

from playground import theory
from playground.engine import RoundRecord


def frame(rounds: list[RoundRecord]) -> pd.DataFrame:
    """One row per round."""
    columns = list(RoundRecord.__dataclass_fields__)
    df = pd.DataFrame([asdict(r) for r in rounds], columns=columns)
    df["latency_s"] = df["draft_s"] + df["verify_s"]
    df["acceptance"] = df["accepted"] / df["k"].where(df["k"] > 0)
    return df


def position_acceptance(rounds: list[RoundRecord]) -> list[float]:
    """For each draft position i: of the rounds that reached i (all before it kept), the share that kept i."""
    k_max = max((r.k for r in rounds), default=0)
    reached, kept = [0] * k_max, [0] * k_max
    for r in rounds:
        for i in range(min(r.k, r.accepted + 1)):
            reached[i] += 1
            kept[i] += i < r.accepted
    return [kept[i] / reached[i] if reached[i] else float("nan") for i in range(k_max)]


def summarize(rounds: list[RoundRecord], baseline_tokens_per_s: float | None = None) -> dict:
    """Headline numbers of a run.

    alpha = accepted / drafted. The theory uses alpha_eval, the acceptance of the draft
    tokens that were actually evaluated (those after a rejection never are), which is the
    per-token probability of Leviathan et al.'s model.

    c = draft time per drafted token / the time of one target step. The target step is the
    baseline's time per token when a target-alone run is known (baseline_tokens_per_s), else
    the mean verify time per round. v = mean verify time per round / one target step: Leviathan
    et al. assume v = 1 (checking k + 1 tokens costs one step); on a CPU it is often more, and
    that gap is why measured speedups fall short of the theory.
    """
    tokens = sum(len(r.new_tokens) for r in rounds)
    draft_s = sum(r.draft_s for r in rounds)
    verify_s = sum(r.verify_s for r in rounds)
    wall = draft_s + verify_s
    drafted = sum(r.k for r in rounds)
    accepted = sum(r.accepted for r in rounds)
    evaluated = sum(min(r.k, r.accepted + 1) for r in rounds)
    draft_rounds = [r for r in rounds if r.k > 0]
    nan = float("nan")
    alpha = accepted / drafted if drafted else nan
    alpha_eval = accepted / evaluated if evaluated else nan
    mean_k = drafted / len(draft_rounds) if draft_rounds else 0.0
    verify_per_round = verify_s / len(rounds) if rounds else nan
    step = 1.0 / baseline_tokens_per_s if baseline_tokens_per_s else verify_per_round
    c = (draft_s / drafted) / step if drafted and step > 0 else nan
    v = verify_per_round / step if rounds and step > 0 else nan
    summary = {
        "rounds": len(rounds),
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall if wall > 0 else nan,
        "drafted": drafted,
        "accepted": accepted,
        "alpha": alpha,
        "alpha_eval": alpha_eval,
        "mean_k": mean_k,
        "mean_accepted": accepted / len(draft_rounds) if draft_rounds else nan,
        "tokens_per_round": tokens / len(rounds) if rounds else nan,
        "draft_s": draft_s,
        "verify_s": verify_s,
        "c": c,
        "v": v,
        "position_acceptance": position_acceptance(rounds),
        "theory_speedup": nan,
        "best_k": None,
        "speedup": nan,
    }
    if draft_rounds and not math.isnan(c) and not math.isnan(alpha_eval):
        k_int = max(1, round(mean_k))
        summary["theory_speedup"] = theory.speedup(alpha_eval, k_int, c)
        summary["best_k"] = theory.best_k(alpha_eval, c)
    if baseline_tokens_per_s:
        summary["speedup"] = summary["tokens_per_s"] / baseline_tokens_per_s
    return summary


def to_csv(rounds: list[RoundRecord]) -> str:
    df = frame(rounds)
    for col in ("draft_tokens", "new_tokens", "p", "q", "u", "alternatives", "residual"):
        df[col] = df[col].map(json.dumps)
    return df.to_csv(index=False)


def to_json(rounds: list[RoundRecord], **meta) -> str:
    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean({**meta, "summary": summarize(rounds), "rounds": [asdict(r) for r in rounds]}), indent=1)
