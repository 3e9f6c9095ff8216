"""The sampled rows' check against the target's own distribution, for every engine alike (ours, HF's, vLLM's).

Greedy rows are compared token for token with the target alone. A sampled row (T > 0) cannot be: its tokens are
one draw. What can be checked is where they came from: the target scores the row's output, and
target_nll = the mean negative log-likelihood per token of the row's new tokens under the target's distribution
at the row's temperature (log softmax(logits / T), one forward pass over the prompt and the output).

A lossless sampler draws from the target alone's distribution, so its rows score like the target alone's own
sampled rows (the expected value is the same: the tempered distribution's entropy). Output from a broken sampler
(tokens the target would almost never draw) scores nats per token above it. `off_distribution` flags a row whose
target_nll exceeds the same pair, category, temperature and engine's target alone by more than NLL_MARGIN nats per
token (ours when that engine ran no target alone). A coarse check by design: one row is one draw of 64 tokens, so it
catches a broken sampler, not a subtle bias (the statistical tests in tests/ check our rule's distribution).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from playground.trace.results import Result
from playground.core.numbers import fmt
from playground.core.progress import Progress, quiet
from playground.run.runner import Runner, encode_prompt
from playground.core.config import DecodeConfig
from playground.run.spec import DrafterSpec, PairSpec, RunSpec
from playground.views.grid import BASELINE

NLL_MARGIN = 1.0  # nats per token above the target alone's sampled rows that flags a row


@torch.no_grad()
def mean_nll(model, prompt_ids: torch.Tensor, tokens: Sequence[int], temperature: float) -> float:
    """The target's mean negative log-likelihood per token of `tokens` after `prompt_ids` (1, L), at temperature."""
    if not tokens or temperature <= 0:
        return math.nan
    device = next(model.parameters()).device
    new = torch.tensor([list(tokens)], dtype=torch.long, device=device)
    ids = torch.cat([prompt_ids.to(device), new], dim=1)
    logits = model(input_ids=ids).logits[0, prompt_ids.shape[1] - 1 : -1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return float(-logp.gather(1, new[0][:, None]).mean())


def score(
    runner: Runner,
    results: Sequence[Result],
    pairs: Sequence[PairSpec],
    prompts: dict[str, str],
    chat: bool = True,
    progress: Progress = quiet,
) -> None:
    """Fill target_nll of every sampled row (T > 0) with its pair's target, then off_distribution."""
    by_name = {p.name: p for p in pairs}
    sampled = [r for r in results if r.temperature > 0 and r.new_tokens and r.pair in by_name]
    for name in dict.fromkeys(r.pair for r in sampled):
        spec = RunSpec(by_name[name], DrafterSpec.target_alone(), DecodeConfig(), next(iter(prompts.values())), chat)
        with runner.session(spec, warm=False) as session:  # the target scores: loaded and on its kernels, no warm-up
            loaded = session.load()
            ids = {c: encode_prompt(loaded.tokenizer, p, chat) for c, p in prompts.items()}
            rows = [r for r in sampled if r.pair == name and r.category in ids]
            for i, r in enumerate(rows):
                progress(f"Scoring the sampled rows with the target ({i + 1}/{len(rows)})", i / max(len(rows), 1))
                r.target_nll = mean_nll(loaded.target, ids[r.category], r.new_tokens, r.temperature)
    flag(results)


def flag(results: Sequence[Result]) -> None:
    """off_distribution: target_nll more than NLL_MARGIN above its target alone's (the same engine's, else ours)."""
    base = {}
    for r in results:
        if r.drafter == BASELINE and not math.isnan(r.target_nll):
            base.setdefault((r.pair, r.category, r.temperature, r.engine), r.target_nll)
    for r in results:
        if math.isnan(r.target_nll):
            continue
        key = (r.pair, r.category, r.temperature)
        ref = base.get(key + (r.engine,), base.get(key + ("ours",)))
        r.off_distribution = None if ref is None else bool(r.target_nll > ref + NLL_MARGIN)


# ---------------------------------------------------------------- the report's section

DISTRIBUTION = (
    "A sampled row cannot be compared token for token; what can be checked is that its tokens come from the "
    "target's distribution. target NLL = the target's mean negative log-likelihood per token of the row's output at "
    "the row's temperature (our target scores every engine's output, one forward pass). A lossless sampler scores "
    f"like the target alone's own sampled rows; **off** = more than {NLL_MARGIN:g} nat per token above "
    "the same engine's target alone on the same prompt (bench.likelihood). A coarse check: one row is one draw, so it "
    "catches a broken sampler, not a subtle bias."
)


def distribution_table(results: Sequence[Result]) -> str:
    """Per configuration sampled at T > 0: the target's mean NLL of its outputs and how many are off (likelihood)."""
    groups: dict[tuple, list[Result]] = {}
    for r in results:
        if r.temperature > 0 and not math.isnan(r.target_nll):
            groups.setdefault((r.engine, r.method, r.k, r.temperature), []).append(r)
    if not groups:
        return "No sampled row was scored."
    lines = [
        "| engine | method | k | T | rows | mean target NLL (nats/token) | off the target's distribution |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (engine, method, k, temperature), rows in groups.items():
        off = sum(bool(r.off_distribution) for r in rows)
        mean = sum(r.target_nll for r in rows) / len(rows)
        lines.append(
            f"| {engine} | {method} | {k} | {temperature:g} | {len(rows)} | {fmt(mean)} | {off} of {len(rows)} |"
        )
    return "\n".join(lines)


def section(results: Sequence[Result]) -> list[str]:
    """The report's lines on the sampled rows; none when no row was scored."""
    if all(math.isnan(r.target_nll) for r in results):
        return []
    return [
        "## Sampled output under the target's distribution (T > 0)",
        "",
        DISTRIBUTION,
        "",
        distribution_table(results),
        "",
    ]
