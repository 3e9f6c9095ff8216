"""python -m playground.bench: the benchmark's command line (bench.cli.main) with vLLM beside ours when asked
(--compare-vllm, vllm.benchmark.VLLMPeer).

This program is where the two meet: bench imports nothing of vllm and vllm nothing of bench (tests/test_layering.py:
a package's __main__ is a program, above every layer, and no module imports it)."""

from __future__ import annotations

from playground.bench import cli
from playground.vllm.benchmark import VLLMPeer


def main(argv: list[str] | None = None) -> int:
    """The command line as `python -m playground.bench` runs it: vLLM's flags and rows included."""
    return cli.main(argv, peers=[VLLMPeer()])


if __name__ == "__main__":
    raise SystemExit(main())
