"""vLLM beside ours in `python -m playground.bench`: its flags (--compare-vllm, --vllm-threads-bind,
--vllm-draft-sample, --vllm-fast-start), the check before anything runs, its row of the TTFT table (--ttft), its rows
in the grid (vllm.peer.run_peer), its section of the report (vllm.report.section) and its keys in the JSON.

bench imports nothing of vllm, nor vllm of bench (tests/test_layering.py): the program, playground/bench/__main__.py,
hands a VLLMPeer to the benchmark's command line (bench.cli.main), which calls it as any bench.cli.Peer. The rows are
trace.results.Result, below both."""

from __future__ import annotations

import argparse
from typing import Callable, Sequence

from playground import models
from playground.core.config import DecodeConfig
from playground.core.errors import PlaygroundError
from playground.core.progress import Progress
from playground.run.runner import Runner
from playground.run.spec import DrafterSpec, PairSpec
from playground.trace.results import Result
from playground.vllm import report
from playground.vllm.engine import VLLMRequest, run_worker, vllm_python
from playground.vllm.models import max_model_len
from playground.vllm.peer import BENCH_METHODS, VLLM_DTYPES, VLLMEngine, run_peer

# vLLM's options of the command line, in --help's order after the benchmark's own: its flag and argparse's keywords.
OPTIONS: tuple[tuple[str, dict], ...] = (
    (
        "--compare-vllm",
        dict(
            action="store_true",
            help="add vLLM (scripts/install.sh --vllm): its target alone, draft model at each fixed k and ngram "
            "on the same pair, precision and prompt tokens; one engine per method, started here",
        ),
    ),
    (
        "--vllm-threads-bind",
        dict(
            metavar="CPUS",
            help="vLLM's VLLM_CPU_OMP_THREADS_BIND, e.g. 0-1 (default: vLLM's 'auto', which keeps a core free)",
        ),
    ),
    (
        "--vllm-draft-sample",
        dict(
            choices=["greedy", "probabilistic"],
            default="greedy",
            help="vLLM's draft_sample_method: 'greedy' (vLLM's default: argmax drafts, p taken as one-hot) or "
            "'probabilistic' (drafts sampled from p, as ours); it matters at T > 0 only (docs/vllm.md)",
        ),
    ),
    (
        "--vllm-fast-start",
        dict(
            action="store_true",
            help="vLLM without torch.compile, in one process: starts in seconds, runs slower (tests)",
        ),
    ),
)


class VLLMPeer:
    """vLLM as the benchmark's peer, one per run of the command line: it keeps what its engines were and what
    failed, for the report and the JSON."""

    name = "vllm"  # its row of the TTFT table

    def __init__(self) -> None:
        self.engines: list[dict] = []  # run_peer's: each engine's label, version, load seconds, arguments
        self.failed: str | None = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        for flag, keywords in OPTIONS:
            parser.add_argument(flag, **keywords)

    def asked(self, args: argparse.Namespace) -> bool:
        return bool(args.compare_vllm)

    def check(self, args: argparse.Namespace) -> None:
        """Before our grid: without vLLM's environment say so at once (PlaygroundError: how to install it)."""
        vllm_python()

    def first_token(
        self, args: argparse.Namespace, pair: PairSpec
    ) -> Callable[[dict[str, list[int]]], dict[str, list[float]]]:
        """--ttft: given {length: prompt token ids}, vLLM's seconds per length (--ttft-reps of them): one engine
        started here for every length, on the target's folder at its precision, max_tokens=1, wall time per
        request."""

        def seconds(ids: dict[str, list[int]]) -> dict[str, list[float]]:
            precision = pair.target_precision or models.default_target_precision()
            target = models.model_folder(pair.target)
            request = VLLMRequest(
                target=target,
                dtype=VLLM_DTYPES[precision],
                max_tokens=1,
                repeats=args.ttft_reps,
                cpu_threads_bind=args.vllm_threads_bind,
                enforce_eager=args.vllm_fast_start,
                in_process=args.vllm_fast_start,
                max_model_len=max_model_len(target, ids, 1),
            )
            done = run_worker(request, ids)
            return {key: [r.wall_s for r in done.results if r.id == key] for key in ids}

        return seconds

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
        """vLLM's rows for the grid that ran (`results`: our target alone's rows are the greedy reference): its
        target alone and every method the bench runs (BENCH_METHODS) at the grid's k. A vLLM failure is kept in
        `failed` and gives no rows: ours are still written."""
        engine = VLLMEngine(
            threads_bind=args.vllm_threads_bind,
            draft_sample_method=args.vllm_draft_sample,
            fast_start=args.vllm_fast_start,
        )
        try:
            rows, self.engines = run_peer(
                runner, results, pairs, prompts, decodes, drafters, engine, methods=BENCH_METHODS, progress=progress
            )
        except PlaygroundError as exc:
            self.failed = f"vLLM: {exc}"
            return []
        return rows

    def section(self, results: Sequence[Result]) -> list[str]:
        """The report's lines about vLLM (after the geometric means); none when the run had no vLLM rows."""
        return report.section(results, self.engines)

    def json(self) -> dict:
        return {"vllm_engines": self.engines, "vllm_error": self.failed}
