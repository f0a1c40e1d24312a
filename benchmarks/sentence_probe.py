"""Issue 33's sentence-embedding figures, each encoder beside averaged word2vec doing the same work:

- SST-2 linear probe (SentEval-style): every sentence of SST-2 train (67,349) and dev (872) becomes one vector, a
  logistic regression (scikit-learn, the same settings for every encoder) is fitted on train and scored on dev;
- Multi30k retrieval: each test2016 English caption finds its German translation among all 1,000 (and back) by
  cosine similarity: top-1, top-5, MRR (corpusforge.models.objectives.retrieval_scores, the stage's own scoring).

Encoders: ``--sentence ID`` (a sentence_embeddings artifact: its unit vectors), ``--bert ID`` (a bert lm, its last
layer mean-pooled over the real tokens, no siamese training), ``--w2v ID`` (an embeddings artifact: the mean of the
vectors of a sentence's lowercased whitespace tokens that it knows; zeros when it knows none; the SBERT paper's
"average GloVe" baseline). Usage:

    python benchmarks/sentence_probe.py --store STORE --sentence ID --bert ID --w2v ID [--probe] [--retrieval]

Prints a table and one ``BENCH_JSON`` line.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.common import SHARED, emit


def read_sst2(path: Path) -> tuple[list[str], list[int]]:
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh, dialect="excel-tab"))
    return [r["sentence"] for r in rows], [int(r["label"]) for r in rows]


def w2v_encoder(vectors):
    def encode(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), vectors.vector_size), dtype=np.float32)
        for i, t in enumerate(texts):
            known = [vectors[w] for w in t.lower().split() if w in vectors.key_to_index]
            if known:
                out[i] = np.mean(known, axis=0)
        return out
    return encode


def bert_encoder(lm_dir: Path):
    import torch

    from corpusforge.models.batching import pad
    from corpusforge.models.pooling import pool
    from corpusforge.tasks.lm.inference import load_trained

    model, tok, _spec = load_trained(lm_dir)
    model.eval()
    cfg = model.cfg

    def encode(texts: list[str]) -> np.ndarray:
        ids = [[cfg.cls_id, *x[: cfg.block_size - 2], cfg.sep_id] for x in tok.encode_batch(texts)]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.zeros((len(ids), cfg.n_embd), dtype=np.float32)
        with torch.no_grad():
            for s in range(0, len(order), 256):
                chunk = order[s: s + 256]
                x, mask = pad([ids[i] for i in chunk], cfg.pad_id)
                out[chunk] = pool(model.hidden_states(x, None, mask), mask, "mean").numpy()
        return out
    return encode


def probe(encode, train: tuple[list[str], list[int]], dev: tuple[list[str], list[int]]) -> dict:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    started = time.perf_counter()
    xtr, xdev = encode(train[0]), encode(dev[0])
    encoded = time.perf_counter() - started
    scaler = StandardScaler().fit(xtr)
    clf = LogisticRegression(max_iter=2000, C=1.0).fit(scaler.transform(xtr), train[1])
    return {"dev_accuracy": float(clf.score(scaler.transform(xdev), dev[1])), "dim": int(xtr.shape[1]),
            "encode_seconds": encoded, "seconds": time.perf_counter() - started}


def retrieval(encode, en: list[str], de: list[str]) -> dict:
    import torch

    from corpusforge.models.objectives import retrieval_scores

    a, b = torch.from_numpy(encode(en)), torch.from_numpy(encode(de))
    return {"en->de": retrieval_scores(a, b), "de->en": retrieval_scores(b, a)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--sentence", action="append", default=[], help="sentence_embeddings artifact id (repeatable)")
    ap.add_argument("--bert", action="append", default=[], help="bert lm artifact id (repeatable)")
    ap.add_argument("--w2v", action="append", default=[], help="embeddings artifact id (repeatable)")
    ap.add_argument("--probe", action="store_true", help="the SST-2 linear probe")
    ap.add_argument("--retrieval", action="store_true", help="Multi30k test2016 retrieval")
    args = ap.parse_args()
    import corpusforge as cf

    encoders = {}
    for kind, ids in (("sentence", args.sentence), ("bert", args.bert), ("w2v", args.w2v)):
        for artifact_id in ids:
            a = cf.artifacts.show(artifact_id, store=args.store)
            name = f"{kind}:{a.name}:{a.id[:12]}"
            if kind == "sentence":
                embedder = a.load()
                encoders[name] = lambda texts, e=embedder: e.encode(texts)
            elif kind == "bert":
                encoders[name] = bert_encoder(a.path)
            else:
                encoders[name] = w2v_encoder(a.load())
    results: dict = {"store": args.store}
    if args.probe:
        sst2 = SHARED / "corpora" / "sst2"
        train, dev = read_sst2(sst2 / "train.tsv"), read_sst2(sst2 / "dev.tsv")
        results["sst2_probe"] = {name: probe(enc, train, dev) for name, enc in encoders.items()}
        for name, r in results["sst2_probe"].items():
            print(f"SST-2 probe  {name:<48} dev accuracy {r['dev_accuracy']:.4f}  dim {r['dim']}  "
                  f"({r['encode_seconds']:.0f} s to encode)")
    if args.retrieval:
        m30k = SHARED / "corpora" / "multi30k"
        en = (m30k / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
        de = (m30k / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
        results["multi30k_retrieval"] = {name: retrieval(enc, en, de) for name, enc in encoders.items()}
        for name, r in results["multi30k_retrieval"].items():
            print(f"Multi30k test2016 {name:<42} en->de top-1 {r['en->de']['top1']:.3f} top-5 {r['en->de']['top5']:.3f}"
                  f" MRR {r['en->de']['mrr']:.3f}; de->en top-1 {r['de->en']['top1']:.3f}")
    rows = [{"task": task, "encoder": name, **r} for task in ("sst2_probe", "multi30k_retrieval")
            for name, r in results.get(task, {}).items()]
    emit("sentence_probe", rows, store=args.store)


if __name__ == "__main__":
    main()
