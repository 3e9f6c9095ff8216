#!/usr/bin/env bash
# Command 2: install what the tests need (once; later runs skip it) and run them all.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev
export PLAYGROUND_REQUIRE_KERNELS="${PLAYGROUND_REQUIRE_KERNELS:-1}"  # this project's machines run the batch-invariant kernels: never skip their tests
python -m pytest -q tests "$@"
