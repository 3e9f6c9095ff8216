"""The benchmark's command line as a table: one row an option of `python -m playground.bench` (bench/cli.py builds
the parser from it; the modes in their own modules add theirs, and so does each peer the program hands it: vLLM's
flags are vllm.benchmark.OPTIONS). Defaults of decoding are DecodeConfig's and the
default drafter's, read from their dataclasses."""

from __future__ import annotations

from dataclasses import fields

from playground.core.config import K_MAX, K_MIN, DecodeConfig
from playground.run.spec import DrafterSpec

# The CLI's decoding defaults are DecodeConfig's and the default drafter's (spec.DrafterSpec), never written again.
DECODE = {f.name: f.default for f in fields(DecodeConfig)}
DRAFTER = {f.name: f.default for f in fields(DrafterSpec)}

# The command line, one row an option, in --help's order: its flag and argparse's keywords for it.
OPTIONS: tuple[tuple[str, dict], ...] = (
    ("--pairs", dict(nargs="+", default=None, help="catalog pair names (default: the default pair)")),
    (
        "--k",
        dict(
            nargs="+",
            default=["2", "4", "6", "adaptive"],
            help=f"draft lengths {K_MIN}..{K_MAX}, 'adaptive' / 'heuristic' (transformers' schedule), 'theory'",
        ),
    ),
    (
        "--tree",
        dict(
            nargs="+",
            default=[],
            metavar="SHAPE",
            help="token trees next to the --k configs: children per depth ('3-2-1-1'), a node budget "
            "('dynamic:12'), a tree sized by the measured costs ('sized:16', 'sized') or shaped by the draft's "
            "confidence ('confidence:16', 'confidence'); each runs with the draft model drafter (or early exit, "
            "when listed)",
        ),
    ),
    (
        "--confidence",
        dict(
            type=float,
            default=DECODE["confidence"],
            help="the draft-confidence k policy's threshold (--k confidence), 0..0.95",
        ),
    ),
    ("--temps", dict(nargs="+", default=[f"{DECODE['temperature']:g}"], help="temperatures 0..2 (0 = greedy)")),
    (
        "--drafters",
        dict(
            nargs="+",
            default=[DRAFTER["kind"].value],
            help="'draft model', 'cross-tokenizer draft model', 'prompt lookup', 'early exit', 'staged' (prompt "
            "lookup drafts for the draft model), 'suffix' (suffix decoding; 'suffix:factor=2,min-prob=0.05,"
            "depth=32,memory'), 'lookahead' (lookahead decoding; 'lookahead:W=5,N=3,G=3,prompt-pool'); "
            "'self int4' (the target's own int4 copy drafts; 'self int4:group=64,head=0', 'self int8'); 'draft model:int4' "
            "(or :fp32/:bf16/:fp16/:int8) for a draft precision; 'early exit:L' to exit after layer L. On a "
            "cross-tokenizer pair 'draft model' runs its draft with the cross-tokenizer drafter",
        ),
    ),
    (
        "--target-precision",
        dict(
            nargs="+",
            metavar="P",
            help="fp32 / bf16 / fp16, one or more (default: this device's, models.default_target_precision)",
        ),
    ),
    (
        "--draft-precision",
        dict(
            nargs="+",
            metavar="P",
            help="fp32 / bf16 / fp16 / int8 / int4 (CPU), one or more, for draft-model drafters without a :precision "
            "(default: this device's, models.default_draft_precision: on CPU int4 where the kernels run, int8 for a "
            "draft int4 refuses)",
        ),
    ),
    (
        "--stock-kernels",
        dict(
            action="store_true",
            help="torch's stock kernels for the target (neither the batch-invariant bf16 kernels nor the fp32 CPU verify kernel), for our engine and the HF peer alike",
        ),
    ),
    ("--prompts", dict(help="JSON file: {category: prompt} or [{category, prompt}]")),
    (
        "--repetitive",
        dict(
            action="store_true",
            help="add the repetitive workload to the prompt set: 'code edits' (a file edited three times, the "
            "fourth asked for) and 'chat quoting' (a chat that quotes itself); playground/bench/repetitive.json",
        ),
    ),
    ("--categories", dict(nargs="+", help="only these categories of the prompt set")),
    ("--max-new-tokens", dict(type=int, default=DECODE["max_new_tokens"])),
    ("--seed", dict(type=int, default=DECODE["seed"])),
    (
        "--reps",
        dict(
            type=int,
            default=1,
            help="run the grid this many times, the order of each prompt's runs rotated each time; each row is then "
            "the run whose speedup (a target alone's: tokens/s) is the median of them (1 to 20)",
        ),
    ),
    (
        "--compare-hf",
        dict(action="store_true", help="add HF generate (target alone, assisted, universal assisted, prompt lookup)"),
    ),
    ("--no-record", dict(action="store_true", help="engine without the per-token p/q instrumentation")),
    (
        "--record-overhead",
        dict(
            type=int,
            metavar="REPS",
            help="instead of the grid: the first pair, drafter, k, temperature and prompt with record on and "
            "off, REPS times each",
        ),
    ),
    ("--targets", dict(help="targets file (default docs/targets.json)")),
    ("--json", dict(help="write every result, the targets and the environment to this file")),
    ("--report", dict(help="write a Markdown report with plotly figures (e.g. docs/reports/benchmarks.md)")),
    ("--title", dict(default="Benchmarks", help="the report's title (its first heading)")),
    ("--quiet", dict(action="store_true", help="no progress lines")),
    (
        "--ttft",
        dict(
            nargs="+",
            type=int,
            metavar="TOKENS",
            help="instead of the grid: the time to the first token on prompts of about these many tokens (ours, "
            "HF generate on the same object, stock transformers, vLLM with --compare-vllm; bench/ttft.py)",
        ),
    ),
    ("--ttft-reps", dict(type=int, default=3, help="timings per engine and prompt length for --ttft (median)")),
    (
        "--ttft-draft-ab",
        dict(
            action="store_true",
            help="with --ttft: also the speculative first round with the draft reading the whole prompt (before "
            "the draft's prompt window, decoding/model.py), interleaved",
        ),
    ),
)
