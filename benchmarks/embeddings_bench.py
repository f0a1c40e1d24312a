"""Embeddings benchmark: our word2vec step next to gensim run directly, and GloVe next to word2vec.

Usage: .venv/bin/python benchmarks/embeddings_bench.py [--corpus ../shared/corpora/ptb/ptb.train.txt]
       [--evaldata ../shared/evaldata] [--repeats 3] [--glove-epochs 15] [--workers 2]

- word2vec (skip-gram, d100, window 5, neg 5, min_count 5, sample 1e-3, 5 epochs): our step
  (corpusforge.tasks.embeddings.word2vec.build_gensim_embeddings, which trains from a corpus file) against gensim
  called directly with the same keyword arguments, both the usual ``Word2Vec(sentences=list)`` and
  gensim's own ``corpus_file=`` mode. Runs alternate and medians are reported. Words/s = raw corpus
  words x epochs / training seconds (gensim's own measure); the step's wall time (read Parquet, write
  the sentence file, train, export all formats) is reported too.
- GloVe (our PyTorch fit on the DuckDB co-occurrences, window 10, x_max 10, alpha 3/4) with the
  same evaluation, and its seconds per epoch on this machine's CPU.
Every model is evaluated on questions-words, WordSim-353 and SimLex-999 with the same code.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def evaluate(words, vectors, evaldata: Path) -> dict[str, float]:
    from corpusforge.tasks.embeddings.eval import evaluate_vectors

    _, m = evaluate_vectors(words, vectors, analogies=str(evaldata / "questions-words.txt"),
                            similarity=[str(evaldata / "wordsim353.tsv"), str(evaldata / "simlex999.txt")])
    return {k: m[k] for k in ("analogy_accuracy", "analogy_covered", "wordsim353_spearman", "wordsim353_oov_pairs",
                              "simlex999_spearman", "simlex999_oov_pairs")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared/corpora/ptb/ptb.train.txt")
    ap.add_argument("--evaldata", type=Path, default=REPO.parent / "shared/evaldata")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--glove-epochs", type=int, default=15)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    import polars as pl
    from gensim.models import Word2Vec

    from corpusforge.models.word2vec import load_vectors, write_sentences
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.embeddings.config import EmbeddingsConfig
    from corpusforge.tasks.embeddings.word2vec import build_gensim_embeddings, gensim_params_for
    from corpusforge.tasks.embeddings.glove import build_cooccurrence, build_glove
    from corpusforge.tasks.step import StepResult

    tmp = Path(tempfile.mkdtemp(prefix="cf-embbench-"))
    lines = args.corpus.read_text(encoding="utf-8").splitlines()
    (tmp / "corpus").mkdir()
    pl.DataFrame({"doc_id": [str(i) for i in range(len(lines))], "text": lines}).write_parquet(tmp / "corpus/train.parquet")
    corpus = StepResult(id="0" * 64, step="corpus", name="bench", path=str(tmp / "corpus"), reused=False, seconds=0.0)
    sentences = [line.lower().split() for line in lines]
    sentences = [s for s in sentences if s]
    write_sentences(lines, tmp / "sentences.txt")
    n_words = sum(len(s) for s in sentences)
    print(f"corpus {args.corpus.name}: {len(sentences):,} lines, {n_words:,} words; cpu cores {os.cpu_count()}")

    base = dict(kind="word2vec", tokens="whitespace", sg=1, dim=100, window=5, negative=5, min_count=5, epochs=5, sample=1e-3,
                workers=args.workers, seed=1)
    params = gensim_params_for(EmbeddingsConfig(**base))
    rows: dict[str, list[dict]] = {"ours (step, corpus_file)": [], "gensim sentences=list": [], "gensim corpus_file=": []}
    for rep in range(args.repeats):
        # ours: a fresh store each time so the step really trains (seed varies so ids differ anyway)
        t0 = time.perf_counter()
        res = build_gensim_embeddings(corpus, EmbeddingsConfig(**{**base, "seed": 1 + rep}),
                                      ArtifactStore(tmp / f"store{rep}"))
        wall = time.perf_counter() - t0
        m = json.loads((Path(res.path) / "manifest.json").read_text())["metrics"]
        words, vecs = load_vectors(Path(res.path) / "vectors.bin")
        rows["ours (step, corpus_file)"].append({"wps": m["words_per_second"], "train_s": m["train_seconds"],
                                                 "wall_s": wall, **evaluate(words, vecs, args.evaldata)})
        for label in ("gensim sentences=list", "gensim corpus_file="):
            t0 = time.perf_counter()
            model = Word2Vec(**{**params, "seed": 1 + rep})
            if label.endswith("list"):
                model.build_vocab(sentences)
                t1 = time.perf_counter()
                model.train(sentences, total_examples=model.corpus_count, epochs=model.epochs)
            else:
                model.build_vocab(corpus_file=str(tmp / "sentences.txt"))
                t1 = time.perf_counter()
                model.train(corpus_file=str(tmp / "sentences.txt"), total_examples=model.corpus_count,
                            total_words=model.corpus_total_words, epochs=model.epochs)
            t2 = time.perf_counter()
            rows[label].append({"wps": model.corpus_total_words * model.epochs / (t2 - t1), "train_s": t2 - t1,
                                "wall_s": t2 - t0, **evaluate(model.wv.index_to_key, model.wv.vectors, args.evaldata)})
        print(f"repeat {rep + 1}: " + ", ".join(f"{k}: {v[-1]['wps']:,.0f} w/s" for k, v in rows.items()), flush=True)

    def med(label: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[label])

    print("\n## word2vec skip-gram (d100, window 5, neg 5, min_count 5, sample 1e-3, 5 epochs, "
          f"{args.workers} workers), medians of {args.repeats}\n")
    print("| run | words/s | train s | wall s | analogy acc | covered | WS353 rho | WS353 OOV | SimLex rho | SimLex OOV |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label in rows:
        print(f"| {label} | {med(label, 'wps'):,.0f} | {med(label, 'train_s'):.1f} | {med(label, 'wall_s'):.1f} | "
              f"{med(label, 'analogy_accuracy'):.4f} | {med(label, 'analogy_covered'):,.0f} | "
              f"{med(label, 'wordsim353_spearman'):.3f} | {med(label, 'wordsim353_oov_pairs'):.0f} | "
              f"{med(label, 'simlex999_spearman'):.3f} | {med(label, 'simlex999_oov_pairs'):.0f} |")
    ours = med("ours (step, corpus_file)", "wps")
    for label in ("gensim sentences=list", "gensim corpus_file="):
        print(f"\nratio ours / {label} (words/s, medians): {ours / med(label, 'wps'):.2f}")

    # GloVe on the same corpus
    store = ArtifactStore(tmp / "glove-store")
    gcfg = EmbeddingsConfig(kind="glove", tokens="whitespace", dim=100, window=10, min_count=5, epochs=args.glove_epochs, device="cpu",
                            seed=1)
    t0 = time.perf_counter()
    cooc = build_cooccurrence(corpus, gcfg, store)
    cooc_s = time.perf_counter() - t0
    cm = json.loads((Path(cooc.path) / "manifest.json").read_text())["metrics"]
    glove = build_glove(cooc, gcfg, store)
    gm = json.loads((Path(glove.path) / "manifest.json").read_text())["metrics"]
    epochs = json.loads((Path(glove.path) / "training.json").read_text())["epochs"]
    words, vecs = load_vectors(Path(glove.path) / "vectors.bin")
    ge = evaluate(words, vecs, args.evaldata)
    print(f"\n## GloVe (d100, window 10, x_max {gcfg.x_max:g}, alpha 0.75, AdaGrad lr 0.05, {args.glove_epochs} epochs, CPU)\n")
    print(f"co-occurrence in DuckDB: {cooc_s:.1f} s, {cm['nonzero']:,} non-zero entries, vocab {cm['vocab_size']:,}")
    print(f"epoch seconds (CPU, {platform.processor() or platform.machine()}): median "
          f"{statistics.median(e['epoch_seconds'] for e in epochs):.1f}, min {min(e['epoch_seconds'] for e in epochs):.1f}; "
          f"final loss {gm['final_loss']:.4f}")
    print("| model | analogy acc | covered | WS353 rho | SimLex rho |\n|---|---|---|---|---|")
    print(f"| GloVe (ours) | {ge['analogy_accuracy']:.4f} | {ge['analogy_covered']:,} | {ge['wordsim353_spearman']:.3f} | "
          f"{ge['simlex999_spearman']:.3f} |")
    label = "ours (step, corpus_file)"
    print(f"| word2vec skip-gram (ours, median) | {med(label, 'analogy_accuracy'):.4f} | "
          f"{med(label, 'analogy_covered'):,.0f} | {med(label, 'wordsim353_spearman'):.3f} | "
          f"{med(label, 'simlex999_spearman'):.3f} |")
    print(json.dumps({"word2vec": rows, "glove": {"eval": ge, "epochs": epochs, "cooc_seconds": cooc_s}}, default=float))

    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from common import emit, row

    case = f"word2vec sg d100, 5 epochs, {args.corpus.name}, medians of {args.repeats}"
    emit("embeddings", [
        row("embeddings", case, "words_per_s vs gensim sentences=list (higher is better)", ours,
            med("gensim sentences=list", "wps")),
        row("embeddings", case, "words_per_s vs gensim corpus_file= (higher is better)", ours,
            med("gensim corpus_file=", "wps")),
        row("embeddings", case, "wall_s (ours: whole step) vs gensim sentences=list", med(label, "wall_s"),
            med("gensim sentences=list", "wall_s")),
        row("embeddings", case, "analogy_accuracy vs gensim sentences=list", med(label, "analogy_accuracy"),
            med("gensim sentences=list", "analogy_accuracy")),
        row("embeddings", f"GloVe d100, {args.glove_epochs} epochs, CPU", "epoch_s median",
            statistics.median(e["epoch_seconds"] for e in epochs), None,
            note=f"WS353 {ge['wordsim353_spearman']:.3f}, analogy {ge['analogy_accuracy']:.4f}"),
    ], cooc_seconds=cooc_s)


if __name__ == "__main__":
    main()
