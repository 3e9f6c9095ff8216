#!/usr/bin/env bash
# Command 2: install what the tests need (once; later runs skip it) and run them all.
# PLAYGROUND_REQUIRE_VLLM=1: the vLLM tests fail instead of skipping when vLLM's environment is missing
# (install.sh --dev has just installed it); set it to 0 to let them skip.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev
# PLAYGROUND_REQUIRE_KERNELS=1: where a kernel variant runs and a C compiler is there, kernels that do not load fail their
# tests; elsewhere (no compiler, PLAYGROUND_KERNELS=off) those tests skip with the reason (tests/kernel_support.py)
export PLAYGROUND_REQUIRE_KERNELS="${PLAYGROUND_REQUIRE_KERNELS:-1}"
export PLAYGROUND_REQUIRE_VLLM="${PLAYGROUND_REQUIRE_VLLM:-1}"
python -m pytest -q tests "$@"
