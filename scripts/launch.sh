#!/usr/bin/env bash
# Command 1: install what the app needs (once; later runs skip it) and launch it on http://127.0.0.1:7860
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec python app.py "$@"
