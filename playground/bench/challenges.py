"""The survey's deployment challenges, measured on one pair: batch size, context length and precision.

Each sweep returns a DataFrame (one row per measured configuration) and checks every greedy output
against the target alone's: the batch sweep each sequence against its own solo run (the Runner's target
alone, one prompt at a time), the context and precision sweeps each run against the target alone at the
same length and precision. Sizes are checked against the memory budget before anything is allocated
(`memory_need`, from the models' configs), and a sweep that would not fit is refused with a message.

Every sweep decodes greedily with a fixed k (the spec's k): greedy, so that every output can be checked.
Used by `python -m playground.bench --challenges ...` and the UI's Challenges tab.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch

from playground import decoding, models, trace
from playground.trace import sametext
from playground.engine.batch import BatchResult
from playground.engine.cache import cache_bytes
from playground.trace.results import columns, grid_frame
from playground.bench.grid import run_grid
from playground.bench.memory import check_memory, check_window, kv_bytes_per_token, memory_left, memory_need
from playground.bench.prompts import PROMPTS
from playground.core.errors import PlaygroundError
from playground.models import LoadedPair
from playground.core.progress import Progress, quiet
from playground.core.records import RoundRecord
from playground.run.runner import Runner, encode_prompt
from playground.core.config import BASELINE, SPECULATIVE, DecodeConfig, KPolicy, Precision
from playground.run.spec import DrafterSpec, RunSpec

MAX_BATCH = 64
LONG_DOCUMENT = (Path(__file__).with_name("long_document.txt")).read_text(encoding="utf-8")
# Sixteen prompts of different lengths (so left padding matters): the benchmark's six, then ten more.
BATCH_PROMPTS = list(PROMPTS.values()) + [
    "Write a Python class `Stack` with push, pop and peek methods.",
    "Explain what a hash table is in three sentences.",
    "Write a SQL query that returns the ten most recent orders with their customer names.",
    "List five tips for writing readable code.",
    "Write a bash one-liner that counts the lines of every .py file in a folder.",
    "What is the difference between a process and a thread?",
    "Write a JavaScript function that debounces another function.",
    "Describe the water cycle for a ten-year-old.",
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Give three reasons why unit tests are useful.",
]


def greedy_decode(spec: RunSpec) -> DecodeConfig:
    """What every challenge run decodes with: greedy, the spec's k fixed, its token budget, recorded (margins)."""
    return DecodeConfig(
        max_new_tokens=spec.decode.max_new_tokens, k=spec.decode.k, policy=KPolicy.FIXED, seed=spec.decode.seed
    )


def _needs_draft_model(spec: RunSpec, what: str) -> None:
    if not decoding.strategy(spec.drafter.kind).batch:
        raise PlaygroundError(
            f"The {what} challenge runs the pair's draft model (the 'draft model' drafter); "
            f"got {spec.drafter.kind.value!r}."
        )


def _equality(comparisons: list[dict]) -> dict:
    """Several outputs' sametext.compare_outputs -> all equal?, how many differ after a near-tie, how many truly, the first."""
    differ = [c for c in comparisons if not c["equal"]]
    first = differ[0] if differ else None
    return dict(
        greedy_equal=not differ,
        near_ties=sum(c["near_tie"] for c in differ),
        real_differences=sum(not c["near_tie"] for c in differ),
        diff_position=first["position"] if first else None,
        gap=min([g for g in (first["gap_spec"], first["gap_base"]) if not math.isnan(g)], default=math.nan)
        if first
        else math.nan,
    )


# ---------------------------------------------------------------- batch size


def _batch_row(
    result: BatchResult, size: int, k: int, solo: list[list[RoundRecord]], precision: str, exact: bool
) -> dict:
    rounds = result.rounds
    s = trace.batch_summary(rounds, sum(len(o) for o in result.outputs))
    checks = [
        sametext.compare_outputs(sametext.as_rounds(out, m), solo[i % len(solo)], precision, exact)
        for i, (out, m) in enumerate(zip(result.outputs, result.margins))
    ]
    return dict(
        batch_size=size,
        method=SPECULATIVE if k else BASELINE,
        k=k,
        sequences=len(result.outputs),
        tokens=s["tokens"],
        seconds=s["seconds"],
        tokens_per_s=s["tokens_per_s"],
        tokens_per_s_per_sequence=s["tokens_per_s"] / size,
        rounds=len(rounds),
        alpha=s["alpha"],
        mean_accepted=s["mean_accepted"],
        draft_s=s["draft_s"],
        verify_s=s["verify_s"],
        max_columns=max((r.columns for r in rounds), default=0),
        kv_mib=max((r.kv_bytes for r in rounds), default=0) / 2**20,
        **_equality(checks),
    )


def batch_sweep(
    runner: Runner,
    spec: RunSpec,
    batch_sizes: Sequence[int],
    prompts: Sequence[str] = tuple(BATCH_PROMPTS),
    progress: Progress = quiet,
) -> pd.DataFrame:
    """Speculative decoding and the target alone, both batched (playground.engine.batch), at each batch size: B sequences
    of the first B prompts (cycled beyond len(prompts)). speedup = speculative tokens/s over the batched target
    alone's at the same B; every sequence's output is compared with its own solo target-alone run."""
    _needs_draft_model(spec, "batch-size")
    sizes = sorted(dict.fromkeys(int(b) for b in batch_sizes))
    if not sizes or sizes[0] < 1 or sizes[-1] > MAX_BATCH:
        raise PlaygroundError(f"Batch sizes must be whole numbers from 1 to {MAX_BATCH}, got {list(batch_sizes)}.")
    decode = greedy_decode(spec)
    k, n_new = decode.k, decode.max_new_tokens
    with runner.session(replace(spec, decode=decode), progress) as session:
        loaded = session.load()
        ids = [encode_prompt(loaded.tokenizer, p, spec.chat)[0].tolist() for p in prompts]
        longest = max(len(i) for i in ids[: sizes[-1]])
        check_window(loaded, longest + n_new + k, f"A prompt of {longest} tokens plus {n_new} new tokens")
        left = memory_left(loaded)
        for size in sizes:  # all of them, before anything runs
            check_memory(
                memory_need(loaded, size, longest, n_new, k), left, f"Batch size {size} ({longest}-token prompts)"
            )
        session.ready()
        solo: list[list[RoundRecord]] = []
        runs = min(sizes[-1], len(ids)) + 2 * len(sizes)
        for i in range(min(sizes[-1], len(ids))):
            progress(f"[{i + 1}/{runs}] solo target alone, prompt {i + 1} (the reference output)", i / runs)
            base = RunSpec(spec.pair, DrafterSpec.target_alone(), replace(decode, k=1), prompts[i], spec.chat)
            solo.append(list(session.rounds(base)))
        rows = []
        done = len(solo)
        for j, size in enumerate(sizes):
            batch = [ids[i % len(ids)] for i in range(size)]
            for method_k in (0, k) if j % 2 == 0 else (k, 0):  # alternate which runs first
                name = SPECULATIVE if method_k else BASELINE
                decoder = session.batch(batch, method_k, n_new)
                for r in decoder:
                    progress(f"[{done + 1}/{runs}] batch {size} · {name} · round {r.round + 1}", done / runs)
                rows.append(
                    _batch_row(decoder.result, size, method_k, solo, loaded.target_precision.value, loaded.invariant)
                )
                done += 1
    progress("done", 1.0)
    frame = pd.DataFrame(rows).sort_values(["batch_size", "k"], kind="stable").reset_index(drop=True)  # plain first
    frame.insert(3, "target_precision", loaded.target_precision.value)
    frame.insert(4, "draft_precision", loaded.draft_precision.value if loaded.draft_precision else "")
    plain = frame[frame["method"] == BASELINE].set_index("batch_size")["tokens_per_s"]
    frame["speedup"] = [
        trace.speedup(r.tokens_per_s, plain[r.batch_size]) if r.method == SPECULATIVE else 1.0
        for r in frame.itertuples()
    ]
    return frame


# ---------------------------------------------------------------- context length


def _kv_bytes(decoder) -> tuple[int, int]:
    """(target, draft) KV-cache bytes of a finished solo decoder (engine.SpeculativeDecoder; a model drafter
    keeps its cache as `cache`)."""
    return cache_bytes(decoder.cache), cache_bytes(getattr(decoder.drafter, "cache", None))


def context_sweep(
    runner: Runner, spec: RunSpec, lengths: Sequence[int], document: str = LONG_DOCUMENT, progress: Progress = quiet
) -> pd.DataFrame:
    """Speculative decoding and the target alone (the Runner, one sequence) on the first L tokens of a long
    document (no chat template: the models continue it), for each L: speedup (whole run, and the decoding
    rounds alone, without the prompt pass), alpha, c and v (trace.summarize), the draft's and the verify's
    milliseconds, the prompt pass's seconds, and the KV cache's memory (measured, and from the config)."""
    _needs_draft_model(spec, "context-length")
    decode = greedy_decode(spec)
    lengths = sorted(dict.fromkeys(int(n) for n in lengths))
    if not lengths or lengths[0] < 8:
        raise PlaygroundError(f"Context lengths must be whole numbers >= 8, got {list(lengths)}.")
    rows = []
    with runner.session(replace(spec, decode=decode, chat=False), progress) as session:
        loaded = session.load()
        doc = loaded.tokenizer(document, add_special_tokens=False).input_ids
        if lengths[-1] > len(doc):
            raise PlaygroundError(
                f"The built-in document has {len(doc)} tokens for this tokenizer; the longest context "
                f"it can give is {len(doc)}, asked for {lengths[-1]}."
            )
        check_window(
            loaded,
            lengths[-1] + decode.max_new_tokens + decode.k,
            f"A context of {lengths[-1]} tokens plus {decode.max_new_tokens} new tokens",
        )
        left = memory_left(loaded)
        for n in lengths:
            check_memory(memory_need(loaded, 1, n, decode.max_new_tokens, decode.k), left, f"A context of {n} tokens")
        specs = [
            RunSpec(spec.pair, spec.drafter, decode, loaded.tokenizer.decode(doc[:n]), chat=False) for n in lengths
        ]
        session.ready()
        per_token = kv_bytes_per_token(loaded.target) + kv_bytes_per_token(loaded.draft)
        for j, (n, s) in enumerate(zip(lengths, specs)):
            progress(f"[{j + 1}/{len(lengths)}] context {n} tokens", j / len(lengths))
            out: dict = {}
            for which in (BASELINE, SPECULATIVE) if j % 2 == 0 else (SPECULATIVE, BASELINE):
                decoder = session.decoder(s.baseline() if which == BASELINE else s)
                out[which] = (list(decoder), decoder)
            (base, _), (rounds, decoder) = out[BASELINE], out[SPECULATIVE]
            rows.append(_context_row(n, decoder, rounds, base, session.profile(s), loaded, per_token))
    progress("done", 1.0)
    return pd.DataFrame(rows)


def _context_row(
    n: int, decoder, rounds: list[RoundRecord], base: list[RoundRecord], profile, loaded: LoadedPair, per_token: int
) -> dict:
    s = trace.summarize(rounds, base, profile)
    later, base_later = rounds[1:], base[1:]
    drafted = sum(r.k for r in later)
    draft_rounds = [r for r in later if r.k]
    target_kv, draft_kv = _kv_bytes(decoder)
    check = sametext.compare_outputs(rounds, base, loaded.target_precision.value, loaded.invariant)
    return dict(
        context=decoder.prompt_len,
        target_precision=loaded.target_precision.value,
        draft_precision=loaded.draft_precision.value if loaded.draft_precision else "",
        k=decoder.config.k,
        tokens=s["tokens"],
        tokens_per_s=s["tokens_per_s"],
        baseline_tokens_per_s=s["baseline_tokens_per_s"],
        speedup=s["speedup"],
        decode_speedup=trace.summarize(later, base_later)["speedup"] if later and base_later else math.nan,
        alpha=s["alpha"],
        c=s["c"],
        v=s["v"],
        draft_ms_per_token=1000 * sum(r.draft_s for r in later) / drafted if drafted else math.nan,
        verify_ms_per_round=1000 * sum(r.verify_s for r in draft_rounds) / len(draft_rounds)
        if draft_rounds
        else math.nan,
        target_step_ms=1000 * sum(r.seconds for r in base_later) / len(base_later) if base_later else math.nan,
        prompt_pass_s=rounds[0].seconds,
        baseline_prompt_pass_s=base[0].seconds,
        kv_mib_target=target_kv / 2**20,
        kv_mib_draft=draft_kv / 2**20,
        kv_mib_estimate=(decoder.ids.shape[1]) * per_token / 2**20,
        greedy_equal=check["equal"],
        near_tie=None if check["equal"] else check["near_tie"],
        diff_position=check["position"],
        gap=min([g for g in (check["gap_spec"], check["gap_base"]) if not math.isnan(g)], default=math.nan),
    )


# ---------------------------------------------------------------- precision

PRECISION_COLUMNS = columns("precision")


def default_precisions(device: torch.device | None = None) -> tuple[list[str], list[str]]:
    """(target, draft) precisions of the grid: fp32 and bf16 (and fp16 on a GPU) for both; int8 drafts on CPU, and
    int4 where the CPU kernels run."""
    device = device or models.choose_device()
    if device.type == "cuda":
        return ["fp32", "bf16", "fp16"], ["fp32", "bf16", "fp16"]
    from playground.kernels import ops as kernel_ops

    return ["fp32", "bf16"], ["fp32", "bf16", "int8"] + (["int4"] if kernel_ops.available() else [])


def precision_grid(
    runner: Runner,
    spec: RunSpec,
    target_precisions: Sequence[str],
    draft_precisions: Sequence[str],
    progress: Progress = quiet,
    max_cells: int | None = None,
) -> pd.DataFrame:
    """Target precision x draft precision on the spec's prompt (bench.run_grid: each target precision's own
    target alone first, same engine): alpha, c, v, speedup per cell, each greedy output against the target
    alone at the same target precision. Each model load is checked against the memory budget before it loads
    (the model cache refuses what cannot fit)."""
    _needs_draft_model(spec, "precision")
    targets = [Precision(p) for p in dict.fromkeys(target_precisions)]
    drafts = [Precision(p) for p in dict.fromkeys(draft_precisions)]
    if not targets or not drafts:
        raise PlaygroundError("The precision grid needs at least one target and one draft precision.")
    if models.choose_device().type != "cpu" and {Precision.INT8, Precision.INT4} & set(drafts):
        raise PlaygroundError("int8 and int4 are CPU precisions; on this device use bf16 or fp16.")
    pairs = [replace(spec.pair, target_precision=p) for p in targets]  # PairSpec checks each target precision
    drafters = [DrafterSpec.of(precision=p) for p in drafts]  # the default drafter: the draft model
    results = run_grid(
        runner,
        pairs,
        {"prompt": spec.prompt},
        [greedy_decode(spec)],
        drafters,
        progress=progress,
        max_cells=max_cells,
        chat=spec.chat,
    )
    frame = grid_frame(results)
    return frame[PRECISION_COLUMNS].reset_index(drop=True)
