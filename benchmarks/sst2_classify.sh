#!/usr/bin/env bash
# Issue 33's SST-2 figures (GLUE SST-2: train 67,349 records, dev 872; ../shared/DATA.md), every run through the CLI
# as a user runs it, one after another (one process at a time), into one store:
#   1. classify --preset sst2-bilstm                 (BiLSTM, its embedding from word2vec on the train sentences)
#   2. lm --preset bert-mlm-small                    (BERT pre-training, MLM + NSP, on the SST-2 train sentences
#                                                     without their labels and PTB's train text)
#   3. classify --preset sst2-bert-scratch           (the same encoder shape trained on the labels alone)
#   4. classify --preset sst2-bert-finetune --init   (the pre-trained encoder of 2, fine-tuned)
#   5. the same with --set finetune=lora              (LoRA adapters on the attention projections + the whole head;
#                                                     LORA_SET: extra --set, e.g. a learning rate of its own)
# Usage: SST2_DIR=../shared/corpora/sst2 PTB_DIR=../shared/corpora/ptb STORE=/tmp/sst2-store benchmarks/sst2_classify.sh
#   extra --set for the pre-training: PRE_SET="--set train.max_iters=3000", for the two BERT classifiers: FT_SET
#   (CPU-sized runs use fewer steps than the presets; GPU runs more). Each run's JSON is the last
#   line of $OUT/<name>.json; the dev accuracy/F1 are its metrics (record them in benchmarks/RESULTS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
CF="${CORPUSFORGE:-.venv/bin/corpusforge}"
SST2="${SST2_DIR:-../shared/corpora/sst2}"
PTB="${PTB_DIR:-../shared/corpora/ptb}"
STORE="${STORE:-/tmp/sst2-store}"
OUT="${OUT:-benchmarks/sst2-results}"
mkdir -p "$OUT"
echo "$(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
run() {  # name, args...
  local name=$1; shift
  local start=$SECONDS
  "$CF" "$@" --store "$STORE" --json >"$OUT/$name.json" 2>"$OUT/$name.log"
  echo "$name: $((SECONDS - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
  tail -n 1 "$OUT/$name.json" | python3 -c "import json,sys; d=json.load(sys.stdin); m=d['metrics']; print('  id', d['id'][:12], {k: round(v, 4) for k, v in m.items() if k in ('accuracy', 'f1', 'val_accuracy', 'val_loss', 'val_mlm_loss', 'val_nsp_accuracy', 'val_ppl', 'train_seconds', 'params', 'trainable_percent')})"
}
run bilstm classify train "$SST2/train.tsv" --valid "$SST2/dev.tsv" --preset sst2-bilstm
# shellcheck disable=SC2086
run bert-mlm lm train "$SST2/train.tsv" "$PTB/ptb.train.txt" --preset bert-mlm-small ${PRE_SET:-}
BERT_ID=$(tail -n 1 "$OUT/bert-mlm.json" | python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")
# shellcheck disable=SC2086
run bert-scratch classify train "$SST2/train.tsv" --valid "$SST2/dev.tsv" --preset sst2-bert-scratch ${FT_SET:-}
# shellcheck disable=SC2086
run bert-finetune classify train "$SST2/train.tsv" --valid "$SST2/dev.tsv" --preset sst2-bert-finetune \
    --init "$BERT_ID" ${FT_SET:-}
# shellcheck disable=SC2086
run bert-lora classify train "$SST2/train.tsv" --valid "$SST2/dev.tsv" --preset sst2-bert-finetune \
    --init "$BERT_ID" --set finetune=lora ${FT_SET:-} ${LORA_SET:-}
