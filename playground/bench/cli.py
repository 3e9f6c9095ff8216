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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, Sequence


from playground import models
from playground.bench import challenges_cli, likelihood, load, report, targets, ttft, variants
from playground.bench.flags import OPTIONS
from playground.bench.grid import decode_grid, run_grid
from playground.bench.machine import environment
from playground.bench.overhead import record_overhead
from playground.trace.results import Result, columns, grid_frame, median_of_runs
from playground.bench.prompts import load_prompts
from playground.core.errors import PlaygroundError
from playground.core.numbers import json_safe
from playground.core.progress import Progress, printer, quiet
from playground.run.runner import Runner
from playground.core.config import DecodeConfig, Precision
from playground.run.spec import DrafterSpec, PairSpec, RunSpec, parse_drafter_name
from playground.core.inputs import parse_list

PRECISIONS = [p.value for p in Precision]


# Flags of the modes that live in their own modules, added after the table in this order.
MODULE_OPTIONS = (
    challenges_cli.add_arguments,  # --challenges batch context precision, --batch-sizes, --context-lengths
    variants.add_arguments,  # --kernel-variants: the kernel variants against each other
    load.add_arguments,  # --under-load, --load-reps, --hogs
)


class Peer(Protocol):
    """An engine benchmarked beside ours that bench imports nothing of (vLLM's: vllm.benchmark.VLLMPeer): the program,
    playground/bench/__main__.py, hands it to main(). It adds its flags, checks before anything runs that it can
    run, times its first token for --ttft, adds its rows to the grid's and writes its section of the report."""

    name: str  # its engine's name: its row of the TTFT table
    failed: str | None  # set when its rows could not be had: ours are still written, the exit code is 1

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def asked(self, args: argparse.Namespace) -> bool:
        """Whether the arguments ask for it (--compare-vllm)."""
        ...

    def check(self, args: argparse.Namespace) -> None:
        """Before anything runs: PlaygroundError, saying what to do, when it cannot run here."""
        ...

    def first_token(self, args: argparse.Namespace, pair: PairSpec) -> ttft.PeerTimer:
        """--ttft: given {length: prompt token ids}, its seconds per length (bench.ttft.run_ttft's `peers`)."""
        ...

    def rows(
        self,
        args: argparse.Namespace,
        runner: Runner,
        results: Sequence[Result],
        pairs: Sequence[PairSpec],
        prompts: dict[str, str],
        decodes: Sequence[DecodeConfig],
        drafters: Sequence[DrafterSpec],
        progress: Progress,
    ) -> list[Result]:
        """Its rows for the grid that ran (`results`: ours); none, and `failed` set, when it failed."""
        ...

    def section(self, results: Sequence[Result]) -> list[str]:
        """Its lines of the report, after the geometric means."""
        ...

    def json(self) -> dict:
        """Its keys in --json."""
        ...


def build_parser(peers: Sequence[Peer] = ()) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m playground.bench",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    for flag, keywords in OPTIONS:
        p.add_argument(flag, **keywords)
    for add_arguments in MODULE_OPTIONS:
        add_arguments(p)
    for peer in peers:
        peer.add_arguments(p)
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


STDOUT_COLUMNS = columns("cli")


def ttft_main(args: argparse.Namespace, runner: Runner, pair: PairSpec, peers: Sequence[Peer], progress) -> int:
    """--ttft: the time-to-first-token table (bench/ttft.py), the asked peers' rows too, printed, and written with
    --json."""
    if any(n < 8 for n in args.ttft) or args.ttft_reps < 1:
        raise PlaygroundError("--ttft takes prompt lengths of at least 8 tokens, --ttft-reps at least 1.")
    timers = {peer.name: peer.first_token(args, pair) for peer in peers}
    lengths, ab = sorted(set(args.ttft)), args.ttft_draft_ab
    rows = ttft.run_ttft(runner, pair, lengths, args.ttft_reps, peers=timers, progress=progress, draft_ab=ab)
    env = environment()
    print(f"\n{env['date']}  commit {env['commit']}  {env['device']}  torch {env['torch']}\n")
    print(ttft.markdown(rows))
    if args.json:
        doc = {
            "environment": env,
            "args": vars(args),
            "ttft": [asdict(r) | {"median_s": r.median_s, "draft_share": r.draft_share} for r in rows],
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(json_safe(doc), indent=1))
        print(f"\nwrote {args.json}")
    return 0


def command_line(argv: list[str] | None) -> str:
    """The arguments as typed, quoted where they hold a space (for the report and the challenges)."""
    return " ".join(f'"{a}"' if " " in a else a for a in (argv if argv is not None else sys.argv[1:]))


@dataclass
class Grid:
    """What the arguments ask to run: the grid's axes, its prompts and the targets to check."""

    temps: list[float]
    pairs: list[PairSpec]
    drafters: list[DrafterSpec]
    decodes: list[DecodeConfig]
    prompts: dict[str, str]
    checks: list

    def first(self) -> RunSpec:
        """The first pair, drafter, decode config and prompt: what the one-configuration modes run."""
        return RunSpec(self.pairs[0], self.drafters[0], self.decodes[0], next(iter(self.prompts.values())))


def read_grid(args: argparse.Namespace) -> Grid:
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
    return Grid(temps, pairs, drafters, decodes, prompts, targets.load_targets(args.targets))


def overhead_main(args: argparse.Namespace, runner: Runner, spec: RunSpec, progress) -> int:
    """--record-overhead: the first configuration with record on and off (bench/overhead.py)."""
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


def other_mode(args: argparse.Namespace, runner: Runner, grid: Grid, peers: Sequence[Peer], progress) -> int | None:
    """The modes that run instead of the grid, their exit code; None: run the grid. The asked peers are checked
    first: without vLLM's environment say so at once, before our grid."""
    if args.record_overhead is not None:
        return overhead_main(args, runner, grid.first(), progress)
    for peer in peers:
        peer.check(args)
    if args.ttft:
        return ttft_main(args, runner, grid.pairs[0], peers, progress)
    if args.under_load:  # the Run tab's comparison, quiet and with a CPU hog started halfway
        return load.main(args, runner, grid.first(), progress)
    if args.kernel_variants:
        return variants.main(args, grid.pairs[0].target, progress)
    return None


def print_results(frame, checked: list[dict], env: dict) -> None:
    print(f"\n{env['date']}  commit {env['commit']}  {env['device']}  torch {env['torch']}\n")
    print(report.markdown_table(frame, [c for c in STDOUT_COLUMNS if c != "pair" or frame["pair"].nunique() > 1]))
    print("\n" + report.calibration_line(frame))
    for t in checked:
        print(
            f"target: {t['name']}: {report.fmt(t['value'])} ({t['how']} {t['goal']:g}) -> {report.fmt(t['met']) or 'n/a'}"
        )


def write_json(args: argparse.Namespace, env: dict, checked: list[dict], results: list, peers: Sequence[Peer]) -> None:
    """--json: every result (its lists too), the targets checked, the environment, the arguments and the asked
    peers' keys."""
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
    for peer in peers:
        doc |= peer.json()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(json_safe(doc), indent=1, default=str))
    print(f"\nwrote {args.json}")


def main(argv: list[str] | None = None, peers: Sequence[Peer] = ()) -> int:
    """The benchmark's command line; `peers`: the engines run beside ours when asked (the program's: vLLM's)."""
    args = build_parser(peers).parse_args(argv)
    progress = quiet if args.quiet else printer(sys.stderr)
    if args.challenges:  # the deployment challenges (batch size, context length, precision) instead of the grid
        return challenges_cli.main(args, command_line(argv), build_parser().get_default("k"), progress, environment)
    asked = [peer for peer in peers if peer.asked(args)]
    runner = Runner()
    try:
        grid = read_grid(args)
        code = other_mode(args, runner, grid, asked, progress)
        if code is not None:
            return code
        if not 1 <= args.reps <= 20:
            raise PlaygroundError(f"--reps: the grid's repeats must be from 1 to 20, got {args.reps}.")
        runs = [
            run_grid(
                runner,
                grid.pairs,
                grid.prompts,
                grid.decodes,
                grid.drafters,
                compare_hf=args.compare_hf,
                progress=progress,
                max_cells=None,
                stock_kernels=args.stock_kernels,
                rotate=rep,
            )
            for rep in range(args.reps)
        ]
        results = median_of_runs(runs)
    except PlaygroundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for peer in asked:
        results += peer.rows(args, runner, results, grid.pairs, grid.prompts, grid.decodes, grid.drafters, progress)
        if peer.failed:
            print(f"error: {peer.failed}", file=sys.stderr)
    if any(t > 0 for t in grid.temps):  # every engine's sampled rows, scored by the target (bench.likelihood)
        likelihood.score(runner, results, grid.pairs, grid.prompts, progress=progress)
    env = environment()
    frame = report.runs_frame(results)
    checked = targets.check(frame, grid.checks)
    print_results(frame, checked, env)
    if args.json:
        write_json(args, env, checked, results, asked)
    if args.report:
        command = "python -m playground.bench " + command_line(argv)
        lines = [line for peer in asked for line in peer.section(results)]
        report.write_report(results, env, command, Path(args.report), args.targets, peer_lines=lines, title=args.title)
        print(f"wrote {args.report}")
    return 1 if any(peer.failed for peer in asked) else 0
