"""Question -> paragraph retrieval on XQuAD-en (issue 48, item 2): how often the paragraph that holds a question's
answer comes first (top-1), among the first five (top-5), and the mean reciprocal rank, for BM25 (models/retrieval.py
over bm25s) and, given a trained sentence encoder, for dense search and the RRF hybrid; with timings beside an anchor.

Data: ../shared/corpora/xquad-en/dev.json (SQuAD v1.1 format; 120 paragraphs, 623 questions, each question's gold
paragraph is the one it is asked about). Every paragraph is one passage; every question is searched among all 120.
The issue's anchor for BM25 on these paragraphs: top-1 about 0.92, top-5 0.99.

Timing (docs: "Benchmarks" rules): index build and the query loop (all 623 questions, full rankings) are timed
separately, ours and the anchor interleaved (A B, B A, ...), after a warm-up round; median and minimum of the repeats
and the load average are printed. The anchor is ``rank_bm25`` (the common pure-Python BM25; ``.venv/bin/pip install
rank_bm25``), fed the same tokens as ours (bm25s.tokenize: lowercase, English stop words, PyStemmer's English
stemmer): its BM25Okapi scores with Robertson's idf (negative values floored), ours with Lucene's, so both sides'
top-1 is printed, and ours with method="robertson" is compared with it question by question (the same ranking
function but for the floor and a constant factor: it should pick the same paragraph almost everywhere).

    .venv/bin/python benchmarks/qa_retrieval.py --repeats 5
    .venv/bin/python benchmarks/qa_retrieval.py --encoder ID --store DIR   # + dense and hybrid
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import SHARED, emit, header, interleave, loadavg, row as bench_row, timed  # noqa: E402

DATA = SHARED / "corpora" / "xquad-en" / "dev.json"
ANCHOR = {"retrieval_top1": 0.92, "retrieval_top5": 0.99}  # the BM25 figures on these paragraphs


def load_xquad(path: Path) -> tuple[list[str], list[str], list[int]]:
    """(paragraphs, questions, gold paragraph index per question) of a SQuAD v1.1 file, in file order."""
    data = json.loads(path.read_text(encoding="utf-8"))
    paragraphs, questions, gold = [], [], []
    for article in data["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                questions.append(qa["question"])
                gold.append(len(paragraphs))
            paragraphs.append(para["context"])
    return paragraphs, questions, gold


def main() -> None:
    import numpy as np

    from corpusforge.models.retrieval import BM25Index, Retriever, retrieval_metrics

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--encoder", help="a sentence_embeddings artifact id: adds dense and hybrid")
    ap.add_argument("--store", help="the store holding --encoder")
    ap.add_argument("--weights", default="1,1", help="hybrid: W_BM25,W_DENSE")
    args = ap.parse_args()
    if not args.data.is_file():
        print(f"skipped: {args.data} is absent (XQuAD-en, ../shared/corpora/xquad-en/dev.json)")
        return
    header("QA retrieval on XQuAD-en: BM25 (bm25s) beside rank_bm25; dense and hybrid with --encoder")
    paragraphs, questions, gold = load_xquad(args.data)
    print(f"   {len(paragraphs)} paragraphs, {len(questions)} questions; load average before {loadavg()}")
    n = len(paragraphs)

    import bm25s

    index = BM25Index.build(paragraphs)
    results: dict[str, dict] = {}
    extra: dict[str, dict] = {}  # dense / hybrid timings
    rankings: dict[str, list[list[int]]] = {}

    def ours_query():
        return [[i for i, _ in hits] for hits in index.search(questions, n)]

    rankings["bm25"] = ours_query()
    sides = {"ours: build": timed(lambda: BM25Index.build(paragraphs)), "ours: queries": timed(ours_query)}
    try:
        import rank_bm25
    except ImportError:
        rank_bm25 = None
        print("   anchor: none available (rank_bm25 is not installed: .venv/bin/pip install rank_bm25)")
    if rank_bm25 is not None:
        tokenize = index.tokenize  # the same tokens for both sides

        def anchor_build():
            return rank_bm25.BM25Okapi(tokenize(paragraphs))

        okapi = anchor_build()

        def anchor_query():
            return [np.lexsort((np.arange(n), -okapi.get_scores(words))).tolist() for words in tokenize(questions)]

        rankings["rank_bm25 Okapi"] = anchor_query()
        sides.update({"rank_bm25: build": timed(anchor_build), "rank_bm25: queries": timed(anchor_query)})
        robertson = BM25Index.build(paragraphs, method="robertson")
        same = sum(a[:1] == b[:1] for a, b in zip(
            [[i for i, _ in h] for h in robertson.search(questions, n)], rankings["rank_bm25 Okapi"]))
        print(f"   ours with method='robertson' and rank_bm25's BM25Okapi pick the same top-1 paragraph for "
              f"{same}/{len(questions)} questions")

    if args.encoder:
        import corpusforge as cf

        embedder = cf.artifacts.load(args.encoder, store=args.store)
        weights = tuple(float(w) for w in args.weights.split(","))
        started = time.perf_counter()
        vectors = embedder.encode(paragraphs)
        encode_s = time.perf_counter() - started
        for mode in ("dense", "hybrid"):
            retriever = Retriever(paragraphs, mode, embedder=embedder, bm25=index, vectors=vectors, weights=weights)
            started = time.perf_counter()
            hits = retriever.search(questions, n)
            rankings[mode] = [[i for i, _ in h] for h in hits]
            extra[mode] = {"query_s": time.perf_counter() - started}
        extra["dense"]["encode_paragraphs_s"] = encode_s

    for name, ranked in rankings.items():
        results[name] = {**retrieval_metrics(ranked, gold), **extra.get(name, {})}

    timing = interleave(sides, args.repeats, warmup=1)
    print(f"\n   bm25s {bm25s.__version__}" + (f", rank_bm25 {getattr(rank_bm25, '__version__', '0.2.2')}"
                                                 if rank_bm25 else "") + f"; load average after {loadavg()}")
    print("| mode | top-1 | top-5 | MRR |")
    print("|---|---:|---:|---:|")
    for name, m in results.items():
        print(f"| {name} | {m['retrieval_top1']:.4f} | {m['retrieval_top5']:.4f} | {m['retrieval_mrr']:.4f} |")
    print(f"| issue's anchor (BM25) | ~{ANCHOR['retrieval_top1']} | ~{ANCHOR['retrieval_top5']} | |")
    print(f"\n| side | median s (min), {args.repeats} interleaved repeats |")
    print("|---|---:|")
    for name, series in timing.items():
        print(f"| {name} | {series['s'].median:.4f} ({series['s'].min:.4f}) |")
    for mode in ("dense", "hybrid"):
        if mode in results:
            extra = (f"; encoding the paragraphs {results['dense']['encode_paragraphs_s']:.2f} s"
                     if mode == "dense" else "")
            print(f"   {mode}: query loop {results[mode]['query_s']:.2f} s (one run){extra}")

    rows = [bench_row("qa_retrieval", "xquad-en bm25", metric, results["bm25"][metric], ANCHOR[metric],
                      target=f"~{ANCHOR[metric]}", note="anchor: the issue's figure")
            for metric in ("retrieval_top1", "retrieval_top5")]
    if rank_bm25 is not None:
        for what in ("build", "queries"):
            rows.append(bench_row("qa_retrieval", f"xquad-en bm25 {what}", "median s",
                                  timing[f"ours: {what}"]["s"].median, timing[f"rank_bm25: {what}"]["s"].median,
                                  note="anchor: rank_bm25 BM25Okapi, same tokens"))
    emit("qa_retrieval", rows, results=results)


if __name__ == "__main__":
    main()
