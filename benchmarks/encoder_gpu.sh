#!/usr/bin/env bash
# Issue 33's GPU figures (benchmarks/encoder_gpu.py) and then benchmarks/gpu.sh's check and MFU, on one GPU machine.
#   wave (together, one process each, sharing the GPU: their times are upper bounds):
#     bilstm-a/-b: sst2-bilstm and seven variants of it (word2vec over more text, two layers, mean pooling,
#       512 hidden units, a doubled learning rate, eight epochs);
#     bert-preset: bert-mlm-small as the preset has it (1,500 steps), sst2-bert-scratch, sst2-bert-finetune, the
#       pre-trained encoder's linear probe, SimCSE from it;
#     bert-big: the same chain with a GPU-sized BERT (6 layers, width 256) pre-trained on SST-2 + PTB + Multi30k
#       English + Tiny Shakespeare for up to BIG_S seconds;
#     sbert / sbert-long: sentence-embeddings-multi30k as the preset has it (900 steps) and 5x longer;
#     gpu.sh check (every family's GPU path);
#   solo, after the wave: gpu.sh mfu (a GPT-2-124M-shaped model, bf16, compiled).
# Needs .gpu-data from benchmarks/encoder_gpu_prep.py (run where gensim is). Usage (from the repo root):
#   OUT=... benchmarks/encoder_gpu.sh       WAVE_S (default 360): each wave process's hard limit; BIG_S (170);
#   MFU_S (150). Logs go to $OUT (default benchmarks/gpu-results), gpu.sh's under $OUT/lm.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${OUT:-benchmarks/gpu-results}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"
run() {  # name, args...
  local name=$1; shift
  timeout "${WAVE_S:-360}" "$PY" benchmarks/encoder_gpu.py "$@" >"$OUT/enc_$name.log" 2>&1
  echo "$name: exit $? after $SECONDS s"
}
run bilstm-a bilstm --variant preset --variant w2v-more --variant two-layers --variant mean-pool &
run bilstm-b bilstm --variant hidden-512 --variant lr-2e-3 --variant epochs-8 --variant w2v-more-two-layers &
run bert-preset bert &
run bert-big bert --more-text --max-seconds "${BIG_S:-170}" --pre-set model.n_layer=6 --pre-set model.n_embd=256 \
    --pre-set train.max_iters=12000 --pre-set train.batch_size=128 --pre-set train.lr=5.0e-4 \
    --pre-set train.warmup_iters=500 --pre-set train.eval_interval=2000 --ft-set train.lr=1.0e-4 &
( run sbert sbert; run sbert-long sbert --set train.max_iters=4500 --set train.eval_interval=1500 ) &
( LIMIT_S=240 OUT="$OUT/lm" bash benchmarks/gpu.sh check > "$OUT/gpu_check.log" 2>&1; echo "check: exit $? after $SECONDS s" ) &
wait
LIMIT_S="${MFU_S:-150}" OUT="$OUT/lm" bash benchmarks/gpu.sh mfu > "$OUT/gpu_mfu.log" 2>&1
echo "mfu: exit $? after $SECONDS s"
for f in "$OUT"/enc_*.log "$OUT"/gpu_check.log "$OUT"/gpu_mfu.log; do echo "== $f"; tail -n 2 "$f" | cut -c1-2500; done
