#!/usr/bin/env bash
# The GPU checks and the three GPU targets of issue 7 (neural LMs), on one GPU machine:
#   0. check: every family's GPU path (bf16 autocast, compile, checkpoint/resume, keep_best, save/load) in 1-2 min (four torch.compile runs);
#   1. shakespeare-char (6 layers, 6 heads, 384 dim, block 256, dropout 0.2): val loss <= 1.47 within 3 minutes;
#   2. a GPT-2-124M-shaped model in bf16 (torch.compile, SDPA/flash attention): MFU >= 50%;
#   3. ptb-lstm-medium (Zaremba et al. 2014 medium): test perplexity <= 82.7 (needs the PTB files: PTB_DIR).
# Usage: benchmarks/gpu.sh [check] [shakespeare] [mfu] [ptb]   (default: all four, each under its own LIMIT_S limit)
#   LIMIT_S (default 590): seconds each target may run; PTB_MAX_SECONDS: the ptb run stops at the first epoch end
#   past this budget and reports the test perplexity there (marked truncated); PTB_DTYPE: its autocast dtype
#   (default auto: bf16 on CUDA, as the preset); PTB_DIR: ptb.{train,valid,test}.txt.
# Needs only python3 with torch (CUDA), numpy and safetensors (all in the GPU image); run from anywhere. Logs go to $OUT (default benchmarks/gpu-results).
# Record the JSON last lines in benchmarks/RESULTS.md under "## lm", with the machine they came from.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${OUT:-benchmarks/gpu-results}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(check shakespeare mfu ptb)
status=0
for t in "${targets[@]}"; do
  echo "=== $t ==="
  extra=()
  [ "$t" = ptb ] && [ -n "${PTB_MAX_SECONDS:-}" ] && extra+=(--max-seconds "$PTB_MAX_SECONDS")
  [ "$t" = ptb ] && [ -n "${PTB_DTYPE:-}" ] && extra+=(--dtype "$PTB_DTYPE")
  timeout "${LIMIT_S:-590}" "$PY" benchmarks/lm_gpu.py "$t" "${extra[@]}" 2>&1 | tee "$OUT/lm_gpu_$t.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
exit $status
