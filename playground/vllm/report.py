"""The report's vLLM section (`--compare-vllm`): per category ours against vLLM's, the spec-decode counters
of both under vLLM's names, greedy outputs compared token for token, and what each vLLM engine was. Pure."""

from __future__ import annotations

import json
from typing import Sequence

import pandas as pd

from playground.trace import sametext
from playground.trace.results import HF_TARGET_ALONE, Result
from playground.vllm.engine import METHOD_LABELS
from playground.trace.counters import SpecCounters
from playground.vllm.peer import SERVER_TARGET, TARGET_ALONE
from playground.core.numbers import fmt as _fmt

VLLM_TARGETS = (METHOD_LABELS["target"], SERVER_TARGET)
ABOUT = (
    "vLLM ran the same pair (the same converted folders), at the same target precision, on the same prompt tokens "
    "(ours, chat template applied, sent as token ids) with the same k, temperature, top-p and seed; one vLLM engine "
    "per method for every prompt. Its draft runs at the engine's dtype, the target's (the converted folder as it "
    "is; a quantised draft in vLLM was not tried), so its draft_precision column names the target's: our bf16 "
    "draft rows are the like-for-like ones, our int8 rows a lever. tokens/s: ours over engine time, vLLM's over the wall time of each "
    "request (prompt pass included), HF's over wall time; speedup: over the same engine's own target alone. "
    "alpha = accepted / drafted draft tokens; mean acceptance length = 1 + accepted / drafts (vLLM's), both from "
    "the counters (vllm:spec_decode_*; ours from trace.vllm_metrics under the same names). Greedy columns: the "
    'first output position where a row differs from that reference ("yes": identical; near-ties as in the '
    "greedy column above). vLLM exposes no per-token verdicts: only these counters."
)


def _cell(x, digits: int = 2) -> str:
    return _fmt(x, digits, missing="")


def _same(tokens: list[int], reference: Result | None) -> str:
    if reference is None:
        return ""
    at = sametext.first_difference(tokens, reference.new_tokens)
    return "yes" if at is None else f"differs at {at}"


def _references(results: Sequence[Result]) -> dict[str, dict[tuple, Result]]:
    """Per reference (ours, HF's and vLLM's target alone): (pair, precision, category) -> its greedy row."""
    refs: dict[str, dict[tuple, Result]] = {"ours": {}, "hf": {}, "vllm": {}}
    for r in results:
        if r.temperature != 0:
            continue
        which = (
            "ours"
            if r.engine == "ours" and r.drafter == TARGET_ALONE
            else "hf"
            if r.method == HF_TARGET_ALONE
            else "vllm"
            if r.method in VLLM_TARGETS
            else None
        )
        if which:
            refs[which][(r.pair, r.target_precision, r.category)] = r
    return refs


def per_category(results: Sequence[Result]) -> str:
    """Every run of ours and vLLM's (and HF's target alone), per category and temperature."""
    refs = _references(results)
    head = (
        "| category | T | engine | method | k | tokens/s | speedup | alpha | mean acceptance length | greedy = ours "
        "target alone | = HF target alone | = vLLM target alone | target NLL (T > 0) |"
    )
    lines = [head, "| " + " | ".join(["---"] * 13) + " |"]
    shown = [r for r in results if r.engine in ("ours", "vllm") or r.method == HF_TARGET_ALONE]
    order = {"ours": 0, "hf": 1, "vllm": 2}
    categories = list(dict.fromkeys(r.category for r in shown))
    for r in sorted(shown, key=lambda r: (r.pair, categories.index(r.category), r.temperature, order[r.engine])):
        key = (r.pair, r.target_precision, r.category)
        greedy = ["", "", ""]
        if r.temperature == 0:
            greedy = [
                _same(r.new_tokens, refs[w].get(key)) if refs[w].get(key) is not r else "(reference)"
                for w in ("ours", "hf", "vllm")
            ]
        length = SpecCounters.from_dict(r.counters).mean_acceptance_length if r.counters else float("nan")
        lines.append(
            f"| {r.category} | {r.temperature:g} | {r.engine} | {r.method} | {r.k} | {_cell(r.tokens_per_s)} | "
            f"{_cell(r.speedup)} | {_cell(r.alpha)} | {_cell(length)} | " + " | ".join(greedy) + f" | {_nll_cell(r)} |"
        )
    return "\n".join(lines)


def _nll_cell(r: Result) -> str:
    return _cell(r.target_nll) + (" **off**" if r.off_distribution else "")


def counters_table(results: Sequence[Result]) -> str:
    """vLLM's counters summed over the categories, per configuration, ours and vLLM's side by side."""
    pooled = pooled_counters([r for r in results if r.engine in ("ours", "vllm")])
    if not pooled:
        return "No run drafted."
    lines = [
        "| engine | method | k | T | num_drafts | num_draft_tokens | num_accepted_tokens | "
        "num_accepted_tokens_per_pos | acceptance by position | mean acceptance length | draft acceptance rate |",
        "| " + " | ".join(["---"] * 11) + " |",
    ]
    for (pair, engine, method, k, temperature), c in pooled.items():
        by_pos = " · ".join(f"{x:.2f}" for x in c.acceptance_by_position)
        lines.append(
            f"| {engine} | {method} | {k} | {temperature:g} | {c.num_drafts} | {c.num_draft_tokens} | "
            f"{c.num_accepted_tokens} | {list(c.num_accepted_tokens_per_pos)} | {by_pos} | "
            f"{_cell(c.mean_acceptance_length)} | {_cell(c.draft_acceptance_rate)} |"
        )
    return "\n".join(lines)


def engines_table(engines: Sequence[dict]) -> str:
    lines = [
        "| pair | engine | k | vLLM | device | start s | arguments |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in engines:
        args = {k: v for k, v in (e.get("engine") or {}).items() if k not in ("model",)}
        lines.append(
            f"| {e['pair']} | {e['label']} | {e['k']} | {e['vllm_version']} | {e['device']} | "
            f"{_cell(e['load_s'], 1)} | `{json.dumps(args, default=str)}` |"
        )
    return "\n".join(lines)


def section(results: Sequence[Result], engines: Sequence[dict]) -> list[str]:
    """The report's lines about vLLM; none when the run had no vLLM rows."""
    if not any(r.engine == "vllm" for r in results):
        return []
    out = [
        "## Ours against vLLM's, per category",
        "",
        ABOUT,
        "",
        per_category(results),
        "",
        "## Spec-decode counters, ours and vLLM's, under vLLM's names",
        "",
        "Summed over the categories (acceptance by position = accepted at draft position i / drafts).",
        "",
        counters_table(results),
        "",
    ]
    if engines:
        out += ["## The vLLM engines", "", engines_table(engines), ""]
    return out


# ---------------------------------------------------------------- acceptance by position

POOL_KEYS = ("pair", "engine", "method", "k", "temperature")


def pooled_counters(results: Sequence[Result]) -> dict[tuple, SpecCounters]:
    """The counters of the rows that drafted, summed per (pair, engine, method, k, temperature) over the prompts."""
    pooled: dict[tuple, SpecCounters] = {}
    for r in results:
        if r.counters.get("num_drafts"):
            key = tuple(getattr(r, name) for name in POOL_KEYS)
            pooled[key] = pooled.get(key, SpecCounters()) + SpecCounters.from_dict(r.counters)
    return pooled


def positions_frame(results: Sequence[Result]) -> pd.DataFrame:
    """Acceptance by draft position, vLLM's definition (accepted at position i / drafts), pooled over the
    prompts of each (pair, engine, method, k, temperature), for ours and vLLM's alike: columns pair, engine,
    method, k, temperature, position (1-based), acceptance."""
    rows = [
        dict(zip(POOL_KEYS, key)) | {"position": i + 1, "acceptance": rate}
        for key, c in pooled_counters(results).items()
        for i, rate in enumerate(c.acceptance_by_position)
    ]
    return pd.DataFrame(rows, columns=list(POOL_KEYS) + ["position", "acceptance"])
