#!/bin/bash
# One call on an AMX host (e.g. the GPU machine lent through the device tool: `bash scripts/amx_device.sh`, OUT set):
# the amx variant's checks and timings, each step time-boxed, logs in $OUT (docs/exactness.md). Not run yet.
set -o pipefail
export PYTHONUNBUFFERED=1 PLAYGROUND_CACHE=/tmp/pgcache HF_HUB_OFFLINE=1
cd "$(dirname "$0")/.."  # the repository root
step() { echo "=== $1 $(date -u +%FT%TZ)"; }
step env; lscpu | grep -E "Model name|^CPU\(s\)|L2|L3"; grep -o -w -E "amx_[a-z0-9]+|avx512_bf16" /proc/cpuinfo | sort | uniq -c; gcc --version | head -1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
step "1 C harness (2 threads)"
gcc -O2 -fopenmp -march=x86-64-v4 -mavx512bf16 -mavx512vnni -mamx-tile -mamx-bf16 scripts/amx_check.c -o /tmp/amx_check -lm \
  && OMP_NUM_THREADS=2 timeout 60 taskset -c 0,1 /tmp/amx_check 2>&1 | tee $OUT/check.txt | grep -v ": ok"; echo "rc=$?"
step "2 pytest test_kernels -k amx"
PLAYGROUND_KERNELS=amx PLAYGROUND_REQUIRE_KERNELS=1 timeout ${PYTEST_S:-100} taskset -c 0-3 python3 -m pytest -q -x -rs -p no:cacheprovider -k amx tests/test_kernels.py 2>&1 | tee $OUT/pytest_kernels.txt | tail -15
step "3 linear bench, 2 threads"
THREADS=2 timeout 80 taskset -c 0,1 python3 scripts/amx_bench.py 2>&1 | tee $OUT/bench2.txt
step "4 model prefill 2000 + V(1), V(9), 2 threads"
THREADS=2 VARIANTS=amx timeout ${TTFT_S:-100} taskset -c 0,1 python3 scripts/amx_ttft.py 2>&1 | grep -v Warning | tee $OUT/ttft2.txt
step "5 linear bench, 16 threads"
THREADS=16 ROWS=1,9,2000 timeout 40 python3 scripts/amx_bench.py 2>&1 | tee $OUT/bench16.txt
step "6 pytest test_exactness -k amx"
PLAYGROUND_KERNELS=amx timeout ${EXACT_S:-60} python3 -m pytest -q -x -rs -p no:cacheprovider -k amx tests/test_exactness.py 2>&1 | tee $OUT/pytest_exactness.txt | tail -8
step end
