#!/usr/bin/env bash
# Command 2: install what the tests need (once; later runs skip it) and run them all.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --dev
python -m pytest -q tests "$@"
