"""The benchmark: our engine (through the Runner) vs the target alone vs HF transformers' generate.

    python -m playground.bench --help

grid.py runs the grid (the CLI, the UI's Sweep and Compare tabs), hf.py the HF peer, targets.py
checks docs/targets.json against a run, report.py writes docs/reports/benchmarks.md, cli.py is the command line.
bench imports nothing of vllm: vLLM's rows (--compare-vllm) are vllm/'s own, handed to the command line by the
program, __main__.py.
"""

from playground.bench.grid import MAX_CELLS, decode_grid, run_grid
from playground.bench.overhead import record_overhead
from playground.trace.results import Result, grid_frame, vs_best_hf
from playground.bench.prompts import PROMPTS, load_prompts


def main(argv: list[str] | None = None) -> int:
    """The benchmark's command line without vLLM (bench.cli.main with no peer): `python -m playground.bench` adds
    it."""
    from playground.bench.cli import main as cli_main

    return cli_main(argv)


__all__ = [
    "MAX_CELLS",
    "PROMPTS",
    "Result",
    "decode_grid",
    "grid_frame",
    "load_prompts",
    "main",
    "record_overhead",
    "run_grid",
    "vs_best_hf",
]
