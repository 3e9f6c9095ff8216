"""Time to the first token on long prompts: `python -m playground.bench --ttft 74 800 2000 [--compare-vllm]`.

The prompt pass (prefill) dominates the first token of a long prompt. Each row is the median of --ttft-reps
timings of one prompt of about N tokens (the start of the bench's long document under a one-line request,
through the target's chat template), greedy, one new token:

- "ours, target alone": the Runner's first round of the target alone (the prompt pass and its token).
- "ours, speculative": the default configuration's first round: the draft's prompt pass, its draft, and the
  target's pass over the prompt and the draft (the first round's tokens arrive together). Its cell also gives the
  draft's part of the round (its prompt pass and proposal: the round's draft_s) and that part's share.
- "ours, speculative, whole prompt drafted" (--ttft-draft-ab): the same round with the draft reading the whole prompt
  (`decoding.model.window(None)`), as before the draft's prompt window, interleaved with the others.
- "hf generate (same object)": `generate(max_new_tokens=1)` on the very same target object (its kernels).
- "stock transformers": a fresh load of the same folder at the same precision with torch's kernels, then
  `generate(max_new_tokens=1)`.
- a peer's row, named after it: "vllm" with --compare-vllm (vllm.benchmark.VLLMPeer.first_token: vLLM's engine on
  the same folder, precision and prompt token ids, max_tokens=1; its wall time per request, one engine started
  here for all lengths).

Ours, HF and stock run in this process, in rotated order within each repeat; a peer runs in its own process
between the first and the second half of the repeats. Speed is reported, never asserted.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import torch

from playground import models
from playground.engine import clock
from playground.decoding import model as draft_model
from playground.models import LoadedPair
from playground.core.progress import Progress, quiet
from playground.run.runner import Runner, Session, encode_prompt
from playground.core.config import DecodeConfig, KPolicy
from playground.run.spec import DrafterSpec, PairSpec, RunSpec

DOCUMENT = Path(__file__).with_name("long_document.txt")
REQUEST = "Summarise the following text in one sentence.\n\n"
OURS, OURS_SPEC, OURS_WHOLE, HF_SAME, STOCK = (
    "ours, target alone",
    "ours, speculative",
    "ours, speculative, whole prompt drafted",
    "hf generate (same object)",
    "stock transformers",
)
# A peer's timing: given {length: prompt token ids}, its seconds per length (its repeats)
PeerTimer = Callable[[dict[str, list[int]]], dict[str, list[float]]]
ENGINES = (OURS, OURS_SPEC, OURS_WHOLE, HF_SAME, STOCK)  # the table's order, the peers' rows after


@dataclass
class TTFTRow:
    engine: str
    tokens: int  # the prompt's length in target tokens
    seconds: list[float] = field(default_factory=list)
    draft_s: list[float] = field(default_factory=list)  # a speculative round's draft part, per timing

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds) if self.seconds else float("nan")

    @property
    def draft_share(self) -> float | None:
        """The median of the draft's share of each timed round (None: not a speculative row)."""
        if not self.draft_s:
            return None
        return statistics.median(d / s for d, s in zip(self.draft_s, self.seconds))


def prompt_of(tokenizer, tokens: int) -> tuple[str, list[int]]:
    """A prompt of about `tokens` tokens (chat template included): the request and the start of the document,
    cut by bisection on its length in characters."""
    text = DOCUMENT.read_text(encoding="utf-8")
    while len(text) < 8 * tokens:  # the document repeated when a longer prompt is asked for
        text += "\n\n" + text
    lo, hi = 1, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if encode_prompt(tokenizer, REQUEST + text[:mid]).shape[1] <= tokens:
            lo = mid
        else:
            hi = mid - 1
    prompt = REQUEST + text[:lo]
    return prompt, encode_prompt(tokenizer, prompt)[0].tolist()


def _first_round(session: Session, spec: RunSpec, row: TTFTRow, whole: bool = False) -> None:
    """Time one first round into row (seconds, and the draft's part where it drafts). whole: the draft reads the whole
    prompt (window(None)), as before the draft's prompt window."""
    with draft_model.window(None if whole else draft_model.WINDOW):
        decoder = session.decoder(spec)  # warm (the session warmed this spec's target and drafter), outside the timing
        start = clock(session.pair.target.device)
        record = decoder.step()
        row.seconds.append(clock(session.pair.target.device) - start)
    if record.k:
        row.draft_s.append(record.draft_s)


@torch.inference_mode()
def _generate_one(model: torch.nn.Module, ids: list[int]) -> float:
    feed = torch.tensor([ids], device=model.device)
    start = clock(model.device)
    model.generate(feed, attention_mask=torch.ones_like(feed), max_new_tokens=1, do_sample=False)
    return clock(model.device) - start


def _same_object(pair: LoadedPair, pair_spec: PairSpec, ids: list[int]) -> float:
    pair.use_kernels(pair_spec.invariant)
    return _generate_one(pair.target, ids)


def stock_model(pair_spec: PairSpec, pair: LoadedPair) -> torch.nn.Module:
    """A fresh load of the target's folder at the target's precision, on torch's kernels (transformers' defaults)."""
    from transformers import AutoModelForCausalLM

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(pair.target_precision.value, torch.float32)
    return (
        AutoModelForCausalLM.from_pretrained(models.model_folder(pair_spec.target), dtype=dtype)
        .to(pair.target.device)
        .eval()
    )


def run_ttft(
    runner: Runner,
    pair_spec: PairSpec,
    lengths: list[int],
    reps: int = 3,
    stock: bool = True,
    peers: Mapping[str, PeerTimer] | None = None,
    progress: Progress = quiet,
    draft_ab: bool = False,
) -> list[TTFTRow]:
    """The rows for each prompt length. peers: each peer's name -> its timing (vLLM's: "vllm", with --compare-vllm).
    draft_ab: also the speculative round with the draft reading the whole prompt (OURS_WHOLE), interleaved."""
    peers = dict(peers or {})
    target_alone = DrafterSpec.target_alone()
    default = DrafterSpec()
    with runner.session(RunSpec(pair_spec, default, prompt="x"), progress) as session:
        pair = session.ready().pair  # loaded, on its kernels, warm for the target alone and the default drafter
        prompts = {n: prompt_of(pair.tokenizer, n) for n in lengths}
        specs = {
            name: {
                n: RunSpec(pair_spec, drafter, DecodeConfig(max_new_tokens=k, policy=KPolicy.FIXED), prompts[n][0])
                for n in lengths
            }
            for name, drafter, k in ((OURS, target_alone, 1), (OURS_SPEC, default, 8))
        }
        other = stock_model(pair_spec, pair) if stock else None
        rows = {(e, n): TTFTRow(e, len(prompts[n][1])) for n in lengths for e in (*ENGINES, *peers)}
        engines: list[tuple[str, Callable[[TTFTRow, int], None]]] = [
            (OURS, lambda row, n: _first_round(session, specs[OURS][n], row)),
            (OURS_SPEC, lambda row, n: _first_round(session, specs[OURS_SPEC][n], row)),
            (HF_SAME, lambda row, n: row.seconds.append(_same_object(pair, pair_spec, prompts[n][1]))),
        ]
        if draft_ab:
            engines.insert(2, (OURS_WHOLE, lambda row, n: _first_round(session, specs[OURS_SPEC][n], row, True)))
        if other is not None:
            _generate_one(other, prompts[lengths[0]][1][:16])  # its first-call costs, outside the timing
            engines.append((STOCK, lambda row, n: row.seconds.append(_generate_one(other, prompts[n][1]))))
        for rep in range(reps):
            if rep == reps // 2:  # each peer once, halfway: all its repeats in one engine
                for peer, time_them in peers.items():
                    progress(f"TTFT: {peer} on the same prompt token ids", 0.5)
                    for n, seconds in time_them({str(n): prompts[n][1] for n in lengths}).items():
                        rows[(peer, int(n))].seconds += seconds
            for n in lengths:
                order = engines[rep % len(engines) :] + engines[: rep % len(engines)]
                for name, time_it in order:
                    progress(
                        f"TTFT: {name}, {rows[(name, n)].tokens} prompt tokens, repeat {rep + 1} of {reps}", rep / reps
                    )
                    time_it(rows[(name, n)], n)
        engines.clear()  # the stock model's last reference: freed before the report
        other = None
    return [row for row in rows.values() if row.seconds]


def markdown(rows: list[TTFTRow]) -> str:
    """One line per engine, a column per prompt length: median seconds, and ours over each other engine; a speculative
    row's cell adds the draft's part of the round (median seconds) and its median share."""
    lengths = sorted({r.tokens for r in rows})
    by = {(r.engine, r.tokens): r.median_s for r in rows}
    draft = {(r.engine, r.tokens): r for r in rows if r.draft_s}
    names = list(dict.fromkeys(r.engine for r in rows))  # ours, HF, stock, then the peers: run_ttft's order
    head = "| engine | " + " | ".join(f"{n} tokens" for n in lengths) + " |"
    lines = [head, "|" + "---|" * (len(lengths) + 1)]
    for name in names:
        cells = []
        for n in lengths:
            s, ours = by.get((name, n)), by.get((OURS, n))
            if s is None:
                cells.append("–")
            elif (name, n) in draft:
                row = draft[(name, n)]
                cells.append(f"{s:.2f} s (draft {statistics.median(row.draft_s):.2f} s, {row.draft_share:.0%})")
            elif name in (OURS, OURS_SPEC, OURS_WHOLE) or ours is None:
                cells.append(f"{s:.2f} s")
            else:
                cells.append(f"{s:.2f} s ({s / ours:.2f}x ours)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
