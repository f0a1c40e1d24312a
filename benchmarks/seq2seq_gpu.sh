#!/usr/bin/env bash
# Issue 32's GPU figures on one GPU machine: the Multi30k de->en presets (benchmarks/seq2seq_gpu.py), then a solo
# timing of the Transformer (tokens/s, and a decoded token's cost with and without the key/value cache).
#   wave 1 (together, one process each, sharing the GPU: their times are upper bounds): multi30k-gru (no attention),
#     multi30k-gru-bahdanau, multi30k-gru-luong (general), the tutorial's 2-layer LSTM
#     without attention (multi30k-gru with cell=lstm, n_layer=2, one direction), multi30k-transformer;
#   solo: multi30k-transformer for SOLO_ITERS steps alone on the GPU, greedy only, with --kv-cache.
# Usage: MULTI30K_DIR=../shared/corpora/multi30k benchmarks/seq2seq_gpu.sh
#   TRAIN_S (default 300): training stops at the first epoch end past it (then decode and score: reported as
#   truncated); WAVE_S (default 450): the hard limit of each run; SOLO_ITERS (default 400). Logs go to $OUT
#   (default benchmarks/gpu-results); each run's last line is its JSON (record it in benchmarks/RESULTS.md).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${OUT:-benchmarks/gpu-results}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
run() {  # name, args...
  local name=$1; shift
  timeout "${WAVE_S:-450}" "$PY" benchmarks/seq2seq_gpu.py --max-seconds "${TRAIN_S:-300}" "$@" >"$OUT/s2s_$name.log" 2>&1
  echo "$name: exit $? after $SECONDS s"
}
run gru multi30k-gru &
run bahdanau multi30k-gru-bahdanau &
run luong multi30k-gru-luong &
run lstm multi30k-gru --set model.cell=lstm --set model.n_layer=2 --set model.bidirectional=false &
run transformer multi30k-transformer --kv-cache &
wait
for f in "$OUT"/s2s_*.log; do echo "== $f"; tail -n 1 "$f" | cut -c1-3000; done
WAVE_S=${SOLO_S:-120} run solo multi30k-transformer --set "train.max_iters=${SOLO_ITERS:-400}" --set train.eval_interval=400 --kv-cache --beams 1
tail -n 1 "$OUT/s2s_solo.log"
