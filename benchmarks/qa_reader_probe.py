"""One fold of the XQuAD reader's cross-validation, run in process with the qa stage's own functions
(tasks/qa/build.py), to try a training setting in 2-3 minutes instead of the preset's six trainings: the reader is
trained on the other four folds' articles (a tenth of them picking the weights) and scored on fold 1 (SQuAD exact
match and F1, the sliding-window baseline on the same questions) and on 30 of its own training paragraphs (does it
fit what it saw?).

    python benchmarks/qa_reader_probe.py --store /tmp/qabench/store --bert f09c41668c9c --lr 1e-3 --iters 300
"""

from __future__ import annotations

import argparse
import glob
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "corpora"


def main() -> None:
    import torch

    from corpusforge.storage.squad import load_squad
    from corpusforge.tasks.qa import build as B
    from corpusforge.tasks.qa.config import qa_config_from_dict
    from corpusforge.tasks.qa.data import Windower, paragraphs_from
    from corpusforge.tasks.qa.inference import Reader, score

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--bert", required=True, help="a bert lm artifact id prefix in --store")
    ap.add_argument("--data", type=Path, default=SHARED / "xquad-en" / "dev.json")
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    torch.set_num_threads(2)
    parent = Path(glob.glob(f"{args.store}/lm/*-{args.bert[:12]}")[0])
    cfg = qa_config_from_dict({"init": args.bert, "max_query_len": 32, "stride": 64, "folds": 5,
                               "model": {"dropout": 0.1, "classifier_dropout": 0.1},  # as xquad-reader-cpu
                               "train": {"max_iters": args.iters, "batch_size": args.batch_size, "lr": args.lr,
                                         "min_lr": args.lr / 10, "warmup_iters": 30, "weight_decay": 0.01,
                                         "beta2": 0.999, "grad_clip": 1.0, "eval_interval": args.iters,
                                         "eval_iters": 0, "log_interval": 50}})
    warnings: list[str] = []
    start = B._start(cfg, parent, warnings)
    m = start["model"]
    windower = Windower(start["tokenizer"], m.block_size, m.cls_id, m.sep_id, cfg.max_query_len, cfg.stride)
    paragraphs = paragraphs_from(load_squad(args.data))
    held_ids = set(B.folds_of(paragraphs, 5)[0])
    held = [p for i, p in enumerate(paragraphs) if i in held_ids]
    inside = [p for i, p in enumerate(paragraphs) if i not in held_ids]
    started = time.time()
    model, *_ = B._fit(cfg, start, windower, *B.hold_out(inside), Path(tempfile.mkdtemp()), None, warnings)
    reader = Reader(model.eval(), start["tokenizer"], {"qa": {"max_query_len": 32, "stride": 64}})
    fold, seen = score(reader, held, 5), score(reader, inside[:30], 5)
    print(f"lr {args.lr} iters {args.iters} batch {args.batch_size}: fold 1 EM {fold['exact_match']:.1f} F1 "
          f"{fold['f1']:.1f} (baseline F1 {fold['baseline_f1']:.1f}); 30 training paragraphs F1 {seen['f1']:.1f}; "
          f"{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
