"""`python -m playground.bench`: speculative decoding vs the target alone vs HF assisted generation.

Every configuration runs in one process on the same prompts, through the same Runner; the baseline
(the target alone, same precision) goes through the same engine and instrumentation, so speedups are
ratios of like with like. A list of precisions makes a grid; each row says its precisions.

Examples:
    python -m playground.bench                                  # default pair, k 2 4 6 adaptive, greedy
    python -m playground.bench --k 4 theory --temps 0 1 --compare-hf --json out.json
    python -m playground.bench --k 4 --tree 2-1-1-1 dynamic:5 --json trees.json   # chain vs trees of 5 nodes
    python -m playground.bench --k confidence --tree dynamic:10 sized --temps 0   # the chain vs trees, sized too
    python -m playground.bench --k 4 --drafters "draft model" "prompt lookup" staged # staged vs each single drafter
    python -m playground.bench --target-precision fp32 bf16 --draft-precision int8 int4 --categories code story
    python -m playground.bench --pairs "SmolLM2 135M -> Qwen2.5-Coder 1.5B (offline, cross-tokenizer)" --compare-hf
    python -m playground.bench --k theory --repetitive --drafters suffix lookahead "prompt lookup" "draft model"   # draft-free
    python -m playground.bench --k 4 --temps 0 0.7 --compare-hf --compare-vllm --report docs/vllm.md   # vLLM's rows too
    python -m playground.bench --ttft 74 800 2000 --compare-vllm --vllm-threads-bind 0-1   # time to first token
    python -m playground.bench --under-load --k confidence --categories code   # a CPU hog halfway through a comparison
    python -m playground.bench --kernel-variants --variant-prefill 2000   # avx512 vs avx2 vs portable kernels
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path


from playground import models
from playground.bench import challenges_cli, likelihood, load, report, targets, ttft, variants
from playground.vllm import models as vllm_models, peer as vllm_peer
from playground.bench.grid import decode_grid, run_grid
from playground.bench.machine import environment
from playground.bench.overhead import record_overhead
from playground.bench.results import grid_frame
from playground.bench.prompts import load_prompts
from playground.vllm.engine import VLLMRequest, run_worker
from playground.errors import PlaygroundError
from playground.numbers import json_safe
from playground.progress import printer, quiet
from playground.runner import Runner
from playground.config import DEFAULT_CONFIDENCE, DrafterKind, K_MAX, K_MIN, Precision
from playground.spec import DrafterSpec, PairSpec, RunSpec, parse_drafter_name
from playground.inputs import parse_list

PRECISIONS = [p.value for p in Precision]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m playground.bench",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    p.add_argument("--pairs", nargs="+", default=None, help="catalog pair names (default: the default pair)")
    p.add_argument(
        "--k",
        nargs="+",
        default=["2", "4", "6", "adaptive"],
        help=f"draft lengths {K_MIN}..{K_MAX}, 'adaptive' / 'heuristic' (transformers' schedule), 'theory'",
    )
    p.add_argument(
        "--tree",
        nargs="+",
        default=[],
        metavar="SHAPE",
        help="token trees next to the --k configs: children per depth ('3-2-1-1'), a node budget "
        "('dynamic:12') or a tree sized by the measured costs ('sized:16', 'sized'); each runs with the draft "
        "model drafter (or early exit, when listed)",
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=DEFAULT_CONFIDENCE,
        help="the draft-confidence k policy's threshold (--k confidence), 0..0.95",
    )
    p.add_argument("--temps", nargs="+", default=["0"], help="temperatures 0..2 (0 = greedy)")
    p.add_argument(
        "--drafters",
        nargs="+",
        default=[DrafterKind.DRAFT_MODEL.value],
        help="'draft model', 'cross-tokenizer draft model', 'prompt lookup', 'early exit', 'staged' (prompt "
        "lookup drafts for the draft model), 'suffix' (suffix decoding; 'suffix:factor=2,min-prob=0.05,"
        "depth=32,memory'), 'lookahead' (lookahead decoding; 'lookahead:W=5,N=3,G=3,prompt-pool'); "
        "'self int4' (the target's own int4 copy drafts; 'self int4:group=64,head=0', 'self int8'); 'draft model:int4' "
        "(or :fp32/:bf16/:fp16/:int8) for a draft precision; 'early exit:L' to exit after layer L. On a "
        "cross-tokenizer pair 'draft model' runs its draft with the cross-tokenizer drafter",
    )
    p.add_argument(
        "--target-precision",
        nargs="+",
        metavar="P",
        help="fp32 / bf16 / fp16, one or more (default: this device's, models.default_target_precision)",
    )
    p.add_argument(
        "--draft-precision",
        nargs="+",
        metavar="P",
        help="fp32 / bf16 / fp16 / int8 / int4 (CPU), one or more, for draft-model drafters without a :precision "
        "(default: this device's, models.default_draft_precision)",
    )
    p.add_argument(
        "--stock-kernels",
        action="store_true",
        help="torch's stock kernels for the target (neither the batch-invariant bf16 kernels nor the fp32 CPU verify kernel), for our engine and the HF peer alike",
    )
    p.add_argument("--prompts", help="JSON file: {category: prompt} or [{category, prompt}]")
    p.add_argument(
        "--repetitive",
        action="store_true",
        help="add the repetitive workload to the prompt set: 'code edits' (a file edited three times, the "
        "fourth asked for) and 'chat quoting' (a chat that quotes itself); playground/bench/repetitive.json",
    )
    p.add_argument("--categories", nargs="+", help="only these categories of the prompt set")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--compare-hf",
        action="store_true",
        help="add HF generate (target alone, assisted, universal assisted, prompt lookup)",
    )
    p.add_argument(
        "--compare-vllm",
        action="store_true",
        help="add vLLM (scripts/install.sh --vllm): its target alone, draft model at each fixed k and ngram "
        "on the same pair, precision and prompt tokens; one engine per method, started here",
    )
    p.add_argument(
        "--vllm-threads-bind",
        metavar="CPUS",
        help="vLLM's VLLM_CPU_OMP_THREADS_BIND, e.g. 0-1 (default: vLLM's 'auto', which keeps a core free)",
    )
    p.add_argument(
        "--vllm-draft-sample",
        choices=["greedy", "probabilistic"],
        default="greedy",
        help="vLLM's draft_sample_method: 'greedy' (vLLM's default: argmax drafts, p taken as one-hot) or "
        "'probabilistic' (drafts sampled from p, as ours); it matters at T > 0 only (docs/vllm.md)",
    )
    p.add_argument(
        "--vllm-fast-start",
        action="store_true",
        help="vLLM without torch.compile, in one process: starts in seconds, runs slower (tests)",
    )
    p.add_argument("--no-record", action="store_true", help="engine without the per-token p/q instrumentation")
    p.add_argument(
        "--record-overhead",
        type=int,
        metavar="REPS",
        help="instead of the grid: the first pair, drafter, k, temperature and prompt with record on and "
        "off, REPS times each",
    )
    p.add_argument("--targets", help="targets file (default docs/targets.json)")
    p.add_argument("--json", help="write every result, the targets and the environment to this file")
    p.add_argument("--report", help="write a Markdown report with plotly figures (e.g. docs/reports/benchmarks.md)")
    p.add_argument("--title", default="Benchmarks", help="the report's title (its first heading)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument(
        "--ttft",
        nargs="+",
        type=int,
        metavar="TOKENS",
        help="instead of the grid: the time to the first token on prompts of about these many tokens (ours, "
        "HF generate on the same object, stock transformers, vLLM with --compare-vllm; bench/ttft.py)",
    )
    p.add_argument("--ttft-reps", type=int, default=3, help="timings per engine and prompt length for --ttft (median)")
    challenges_cli.add_arguments(p)  # --challenges batch context precision, --batch-sizes, --context-lengths
    variants.add_arguments(p)  # --kernel-variants: the kernel variants against each other
    load.add_arguments(p)  # --under-load, --load-reps, --hogs
    return p


def pair_specs(names: list[str], target_precisions: list[str] | None) -> list[PairSpec]:
    """Catalog pairs x target precisions (None: the device default)."""
    precisions = target_precisions or [models.default_target_precision().value]
    out = []
    for name in dict.fromkeys(names):
        pair = models.get_pair(name)
        out += [PairSpec(pair.name, pair.target, pair.draft, target_precision=p) for p in dict.fromkeys(precisions)]
    return out


def drafter_specs(names: list[str], draft_precisions: list[str] | None) -> list[DrafterSpec]:
    """Drafter names (spec.parse_drafter_name); a draft model without ":precision" takes each of draft_precisions."""
    out: list[DrafterSpec] = []
    for name in names:
        d = parse_drafter_name(name)
        if d.needs_draft_model and d.precision is None and draft_precisions:
            out += [d.but(precision=p) for p in draft_precisions]
        else:
            out.append(d)
    out = list(dict.fromkeys(out))
    if models.choose_device().type != "cpu" and any(d.precision in (Precision.INT8, Precision.INT4) for d in out):
        raise PlaygroundError("draft precisions int8 and int4 are CPU only; on this device use bf16 or fp16.")
    return out


STDOUT_COLUMNS = [
    "pair",
    "category",
    "method",
    "k",
    "temperature",
    "target_precision",
    "draft_precision",
    "tokens",
    "tokens_per_s",
    "speedup",
    "vs_best_hf",
    "alpha",
    "nodes",
    "mean_accepted",
    "c",
    "v",
    "calibrated_speedup",
    "greedy",
]


def ttft_main(args: argparse.Namespace, runner: Runner, pair: PairSpec, progress) -> int:
    """--ttft: the time-to-first-token table (bench/ttft.py), printed, and written with --json."""
    if any(n < 8 for n in args.ttft) or args.ttft_reps < 1:
        raise PlaygroundError("--ttft takes prompt lengths of at least 8 tokens, --ttft-reps at least 1.")
    vllm = None
    if args.compare_vllm:

        def vllm(ids: dict[str, list[int]]) -> dict[str, list[float]]:
            precision = pair.target_precision or models.default_target_precision()
            target = vllm_models.model_folder(pair.target)
            request = VLLMRequest(
                target=target,
                dtype=vllm_peer.VLLM_DTYPES[precision],
                max_tokens=1,
                repeats=args.ttft_reps,
                cpu_threads_bind=args.vllm_threads_bind,
                max_model_len=vllm_models.max_model_len(target, ids, 1),
            )
            done = run_worker(request, ids)
            return {key: [r.wall_s for r in done.results if r.id == key] for key in ids}

    rows = ttft.run_ttft(runner, pair, sorted(set(args.ttft)), args.ttft_reps, vllm=vllm, progress=progress)
    env = environment()
    print(f"\n{env['date']}  commit {env['commit']}  {env['device']}  torch {env['torch']}\n")
    print(ttft.markdown(rows))
    if args.json:
        doc = {"environment": env, "args": vars(args), "ttft": [asdict(r) | {"median_s": r.median_s} for r in rows]}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(json_safe(doc), indent=1))
        print(f"\nwrote {args.json}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    progress = quiet if args.quiet else printer(sys.stderr)
    if args.challenges:  # the deployment challenges (batch size, context length, precision) instead of the grid
        argv_text = " ".join(f'"{a}"' if " " in a else a for a in (argv if argv is not None else sys.argv[1:]))
        return challenges_cli.main(args, argv_text, build_parser().get_default("k"), progress, environment)
    runner = Runner()
    try:
        temps = parse_list(
            " ".join(args.temps),
            "--temps",
            float,
            lambda t: math.isfinite(t) and 0 <= t <= 2,
            "temperatures from 0 to 2, 0 = greedy",
        )
        pairs = pair_specs(args.pairs or [models.default_pair()], args.target_precision)
        drafters = drafter_specs(args.drafters, args.draft_precision)
        decodes = decode_grid(
            args.k,
            temps,
            args.max_new_tokens,
            args.seed,
            record=not args.no_record,
            trees=args.tree,
            confidence=args.confidence,
        )
        prompts = load_prompts(args.prompts, args.categories, args.repetitive)
        checks = targets.load_targets(args.targets)
        if args.record_overhead is not None:
            spec = RunSpec(pairs[0], drafters[0], decodes[0], next(iter(prompts.values())))
            o = record_overhead(runner, spec, args.record_overhead, progress)
            print(
                f"record on {o['record_on_tps']:.3f} tok/s, off {o['record_off_tps']:.3f} tok/s (medians of "
                f"{o['reps']}; {o['target_precision']} target): instrumentation costs {o['overhead']:.1%}"
            )
            if args.json:
                Path(args.json).write_text(
                    json.dumps(json_safe({"environment": environment(), "record_overhead": o}), indent=1)
                )
            return 0
        if args.compare_vllm:
            vllm_peer.vllm_python()  # before the grid: without vLLM's environment say so at once
        if args.ttft:
            return ttft_main(args, runner, pairs[0], progress)
        if args.under_load:  # the Run tab's comparison, quiet and with a CPU hog started halfway
            return load.main(args, runner, RunSpec(pairs[0], drafters[0], decodes[0], [*prompts.values()][0]), progress)
        if args.kernel_variants:
            return variants.main(args, pairs[0].target, progress)
        results = run_grid(
            runner,
            pairs,
            prompts,
            decodes,
            drafters,
            compare_hf=args.compare_hf,
            progress=progress,
            max_cells=None,
            stock_kernels=args.stock_kernels,
        )
    except PlaygroundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    engines, failed = [], None
    if args.compare_vllm:  # a vLLM failure keeps our results: they are written, and the exit code says it failed
        engine = vllm_peer.VLLMEngine(
            threads_bind=args.vllm_threads_bind,
            draft_sample_method=args.vllm_draft_sample,
            fast_start=args.vllm_fast_start,
        )
        try:
            rows, engines = vllm_peer.run_peer(
                runner,
                results,
                pairs,
                prompts,
                decodes,
                drafters,
                engine,
                methods=("draft_model", "ngram"),
                progress=progress,
            )
            results += rows
        except PlaygroundError as exc:
            failed = f"vLLM: {exc}"
            print(f"error: {failed}", file=sys.stderr)
    if any(t > 0 for t in temps):  # every engine's sampled rows, scored by the target (bench.likelihood)
        likelihood.score(runner, results, pairs, prompts, progress=progress)
    env = environment()
    frame = report.runs_frame(results)
    checked = targets.check(frame, checks)
    print(f"\n{env['date']}  commit {env['commit']}  {env['device']}  torch {env['torch']}\n")
    print(report.markdown_table(frame, [c for c in STDOUT_COLUMNS if c != "pair" or frame["pair"].nunique() > 1]))
    print("\n" + report.calibration_line(frame))
    for t in checked:
        print(
            f"target: {t['name']}: {report.fmt(t['value'])} ({t['how']} {t['goal']:g}) -> {report.fmt(t['met']) or 'n/a'}"
        )
    if args.json:
        rows = grid_frame(results).to_dict("records")
        doc = {
            "environment": env,
            "args": vars(args),
            "targets": checked,
            "results": [
                row | {"depth_acceptance": r.depth_acceptance, "new_tokens": r.new_tokens, "counters": r.counters}
                for row, r in zip(rows, results)
            ],
        }
        if args.compare_vllm:
            doc["vllm_engines"], doc["vllm_error"] = engines, failed
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(json_safe(doc), indent=1, default=str))
        print(f"\nwrote {args.json}")
    if args.report:
        command = "python -m playground.bench " + " ".join(
            f'"{a}"' if " " in a else a for a in (argv if argv is not None else sys.argv[1:])
        )
        report.write_report(
            results, env, command, Path(args.report), args.targets, vllm_engines=engines, title=args.title
        )
        print(f"wrote {args.report}")
    return 1 if failed else 0
