"""`python -m playground.bench --challenges batch context precision`: the three deployment challenges on one
pair, from one run, as tables on stdout, a Markdown report (with plotly figures next to it) and JSON.

    python -m playground.bench --challenges batch context precision --batch-sizes 1 2 4 8 16 \\
        --context-lengths 64 256 1024 2048 --target-precision fp32 bf16 --draft-precision fp32 bf16 int8 \\
        --k 4 --max-new-tokens 32 --report docs/reports/challenges.md --json docs/reports/challenges.json

The batch and context modes use one fixed k: the first number in --k (DecodeConfig's k when --k is not given). The precision
grid takes --target-precision and --draft-precision (default: fp32 and bf16 targets, fp32, bf16 and int8 drafts on
CPU; fp32, bf16 and fp16 on a GPU). Every run is greedy; its prompt is the 'code' prompt of the built-in set
(--categories picks another) for the precision grid, sixteen built-in prompts for the batch, a long built-in
document for the context.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from playground import models
from playground.bench import challenges
from playground.bench.prompts import load_prompts
from playground.trace.results import columns
from playground.bench.report import markdown_table
from playground.core.errors import PlaygroundError
from playground.core.numbers import json_safe
from playground.core.progress import Progress
from playground.run.runner import Runner
from playground.core.config import DecodeConfig
from playground.run.spec import DrafterSpec, PairSpec, RunSpec, parse_k
from playground.views import challenges as views

MODES = {"batch": views.BATCH, "context": views.CONTEXT, "precision": views.PRECISION}
COLUMNS = {
    views.BATCH: [
        "batch_size",
        "method",
        "k",
        "tokens",
        "seconds",
        "tokens_per_s",
        "speedup",
        "alpha",
        "mean_accepted",
        "max_columns",
        "kv_mib",
        "greedy_equal",
        "near_ties",
        "real_differences",
        "diff_position",
        "gap",
    ],
    views.CONTEXT: [
        "context",
        "k",
        "tokens",
        "tokens_per_s",
        "baseline_tokens_per_s",
        "speedup",
        "decode_speedup",
        "alpha",
        "c",
        "v",
        "draft_ms_per_token",
        "verify_ms_per_round",
        "target_step_ms",
        "prompt_pass_s",
        "kv_mib_target",
        "kv_mib_draft",
        "kv_mib_estimate",
        "greedy_equal",
        "near_tie",
        "diff_position",
        "gap",
    ],
    views.PRECISION: columns("precision_cli"),
}
FIGURES = {
    views.BATCH: views.batch_figure,
    views.CONTEXT: views.context_figure,
    views.PRECISION: views.precision_figure,
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The challenge flags of `python -m playground.bench`."""
    p.add_argument(
        "--challenges",
        nargs="+",
        choices=list(MODES),
        metavar="MODE",
        help="instead of the grid: the deployment challenges, any of batch, context, precision "
        "(see playground/bench/challenges_cli.py)",
    )
    p.add_argument(
        "--batch-sizes",
        nargs="+",
        type=int,
        default=[1, 2, 4, 8, 16],
        metavar="B",
        help="--challenges batch: batch sizes (default 1 2 4 8 16)",
    )
    p.add_argument(
        "--context-lengths",
        nargs="+",
        type=int,
        default=[64, 256, 1024, 2048],
        metavar="L",
        help="--challenges context: prompt lengths in tokens (default 64 256 1024 2048)",
    )


def challenge_k(ks: list[str], default: list[str]) -> int:
    """The fixed k of the batch and context modes: the first number in --k, DecodeConfig's default k when --k was not given."""
    if ks == default:
        return DecodeConfig.default("k")
    numbers = [parse_k(k)[0] for k in ks if str(k).isdigit()]
    return numbers[0] if numbers else DecodeConfig.default("k")


def run(
    runner: Runner,
    spec: RunSpec,
    modes: list[str],
    batch_sizes: list[int],
    context_lengths: list[int],
    target_precisions: list[str],
    draft_precisions: list[str],
    progress: Progress,
) -> dict[str, pd.DataFrame]:
    """{effect: frame} for each mode, in the order given."""
    frames: dict[str, pd.DataFrame] = {}
    for mode in dict.fromkeys(modes):
        effect = MODES[mode]
        if effect == views.BATCH:
            frames[effect] = challenges.batch_sweep(runner, spec, batch_sizes, progress=progress)
        elif effect == views.CONTEXT:
            frames[effect] = challenges.context_sweep(runner, spec, context_lengths, progress=progress)
        else:
            frames[effect] = challenges.precision_grid(runner, spec, target_precisions, draft_precisions, progress)
    return frames


def markdown(frames: dict[str, pd.DataFrame], env: dict, command: str, figures_dir: str | None = None) -> str:
    """The report: per effect, what was found, the published figures, the mechanism, the table (and its figure)."""
    lines = [
        "# The deployment challenges, measured",
        "",
        f"Generated by `{command}` on {env['date']}, commit `{env['commit']}`: {env['device']}, torch {env['torch']}, "
        f"{env['threads']} threads. Every number below comes from that one run; every run is greedy, and each output "
        "is checked against the target alone's (batch: each sequence against its own solo run).",
        "",
    ]
    for effect, frame in frames.items():
        lines += [f"## {effect[0].upper() + effect[1:]}", "", views.headline(effect, frame), ""]
        if figures_dir:
            lines += [f"Figure: [{_figure_name(effect)}]({figures_dir}/{_figure_name(effect)}.html)", ""]
        lines += [views.REFERENCES[effect], "", views.MECHANISMS[effect], ""]
        lines += [markdown_table(frame, [c for c in COLUMNS[effect] if c in frame]), ""]
    return "\n".join(lines)


def _figure_name(effect: str) -> str:
    return "challenge_" + effect.replace(" ", "_")


def main(args: argparse.Namespace, argv_text: str, default_k: list[str], progress: Progress, environment) -> int:
    """Run the challenges a parsed command line asks for; 2 on a refused request (the message on stderr)."""
    import sys

    runner = Runner()
    try:
        name = (args.pairs or [models.default_pair()])[0]
        catalog = models.get_pair(name)
        k = challenge_k(args.k, default_k)
        prompts = load_prompts(args.prompts, args.categories or ["code"])
        spec = RunSpec(
            PairSpec(catalog.name, catalog.target, catalog.draft, (args.target_precision or [None])[0]),
            DrafterSpec.of(precision=(args.draft_precision or [None])[0]),
            DecodeConfig(max_new_tokens=args.max_new_tokens, k=k, seed=args.seed),
            next(iter(prompts.values())),
        )
        targets, drafts = challenges.default_precisions()
        frames = run(
            runner,
            spec,
            args.challenges,
            args.batch_sizes,
            args.context_lengths,
            args.target_precision or targets,
            args.draft_precision or drafts,
            progress,
        )
    except PlaygroundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env = environment()
    command = f"python -m playground.bench {argv_text}"
    print(markdown(frames, env, command))
    if args.report:
        path = Path(args.report)
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "figures").mkdir(exist_ok=True)
        for effect, frame in frames.items():
            FIGURES[effect](frame).write_html(
                path.parent / "figures" / f"{_figure_name(effect)}.html", include_plotlyjs="cdn"
            )
        path.write_text(markdown(frames, env, command, "figures"), encoding="utf-8")
        print(f"wrote {path}")
    if args.json:
        doc = {
            "environment": env,
            "args": vars(args),
            "results": {effect: json_safe(frame.to_dict("records")) for effect, frame in frames.items()},
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))
        print(f"wrote {args.json}")
    return 0
