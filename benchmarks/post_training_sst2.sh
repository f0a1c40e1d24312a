#!/usr/bin/env bash
# Issue 34's figures: a small GPT pre-trained on English text (Penn Treebank train, byte-level BPE), then SFT on
# SST-2 as instructions ("Review: <sentence>\nSentiment:" -> " positive"/" negative": the dev accuracy of its greedy
# answers, beside the BiLSTM of benchmarks/sst2_classify.sh), the same SFT with LoRA adapters (trainable parameters,
# training state, tokens/s, accuracy side by side), then DPO from the SFT model (held-out preference accuracy,
# reward margin, KL to the reference, the answer accuracy before and after). Every run through the CLI as a user
# runs it, one process at a time, into one store:
#   1. lm train PTB --preset ptb-gpt-bpe-small
#   2. lm finetune 1 sst2/train.tsv --valid sst2/dev.tsv --preset sst2-sft               (all weights)
#   3. lm finetune 1 sst2/train.tsv --valid sst2/dev.tsv --preset sst2-sft --set lora... (LoRA r 8 on attention)
#   4. lm finetune 2 <first DPO_ROWS train rows> --valid sst2/dev.tsv --preset sst2-dpo  (rejected: the SFT
#      model's own wrong answer, else the other label)
# Usage: SST2_DIR=../shared/corpora/sst2 PTB_DIR=../shared/corpora/ptb STORE=/tmp/post-store \
#          benchmarks/post_training_sst2.sh
#   PRE_SET / SFT_SET / LORA_SET / DPO_SET: extra --set arguments for each run. The JSON of each run is the last line
#   of $OUT/<name>.json (record the figures in benchmarks/RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
CF="${CORPUSFORGE:-.venv/bin/corpusforge}"
SST2="${SST2_DIR:-../shared/corpora/sst2}"
PTB="${PTB_DIR:-../shared/corpora/ptb}"
STORE="${STORE:-/tmp/post-store}"
OUT="${OUT:-benchmarks/post-training-results}"
DPO_ROWS="${DPO_ROWS:-5000}"
mkdir -p "$OUT"
echo "$(date -u +%FT%TZ) $(nproc) cores, $(python3 -c 'import platform; print(platform.processor() or platform.machine())'), load $(cut -d' ' -f1-3 /proc/loadavg)"
run() {  # name, args...
  local name=$1; shift
  local start=$SECONDS
  "$CF" "$@" --store "$STORE" --json >"$OUT/$name.json" 2>"$OUT/$name.log"
  echo "$name: $((SECONDS - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
  tail -n 1 "$OUT/$name.json" | python3 -c "import json,sys; d=json.load(sys.stdin); m=d['metrics']; print('  id', d['id'][:12], {k: round(v, 4) for k, v in m.items() if k.startswith(('val_', 'test_', 'trainable', 'total_params', 'train_state', 'tokens_per_s', 'train_seconds'))})"
}
id_of() { tail -n 1 "$OUT/$1.json" | python3 -c "import json,sys; print(json.load(sys.stdin)['id'])"; }
# shellcheck disable=SC2086
run pretrain lm train "$PTB/ptb.train.txt" "$PTB/ptb.valid.txt" "$PTB/ptb.test.txt" --preset ptb-gpt-bpe-small ${PRE_SET:-}
PARENT=$(id_of pretrain)
# shellcheck disable=SC2086
run sft lm finetune "$PARENT" "$SST2/train.tsv" --valid "$SST2/dev.tsv" --preset sst2-sft ${SFT_SET:-}
# shellcheck disable=SC2086
run sft-lora lm finetune "$PARENT" "$SST2/train.tsv" --valid "$SST2/dev.tsv" --preset sst2-sft \
  --set post_training.name=sst2-sft-lora --set lora.r=8 --set lora.alpha=16 --set train.lr=3e-3 --set train.min_lr=3e-4 \
  --set train.weight_decay=0 ${LORA_SET:-}
SUBSET="$OUT/sst2-train-$DPO_ROWS.tsv"
head -n $((DPO_ROWS + 1)) "$SST2/train.tsv" >"$SUBSET"
# shellcheck disable=SC2086
run dpo lm finetune "$(id_of sft)" "$SUBSET" --valid "$SST2/dev.tsv" --preset sst2-dpo ${DPO_SET:-}
echo "$(date -u +%FT%TZ) done"
