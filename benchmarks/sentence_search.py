"""Exact cosine search (what `corpusforge embed search` does) beside faiss, on unit vectors of the sentence
encoders' size: where, if anywhere, an approximate index pays.

Both sides answer the same queries over the same vectors, which sit on disk as the search keeps them (an .npy in
the store's scratch for the exact side; a faiss index file beside it for faiss). Per corpus size N and batch of Q
queries, interleaved repeats, each in a fresh process (what one CLI call pays):

- ``exact``: np.load (memory-mapped) + one (Q, d) x (d, N) product + argpartition: corpusforge's path
  (tasks/sentence_embeddings/inference.py ``top_cosines``);
- ``faiss-flat``: faiss.read_index + IndexFlatIP.search: the same exact work in faiss's BLAS kernel;
- ``faiss-hnsw``: faiss.read_index + IndexHNSWFlat.search (M 32, efSearch 128): approximate; its recall@10 against
  the exact answer is reported, and its build time (paid once per corpus) separately.

Whole process (load + search) and inner loop (search alone, after a warm-up) are reported apart.

    .venv/bin/python benchmarks/sentence_search.py --sizes 10000,100000,1000000 --queries 1,100 --repeats 3

Vectors: Gaussian, normalised (no cluster structure, the hard case for an index; real sentence vectors cluster,
which favours HNSW's recall but not the exact side's time, which depends on N and d only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit, header, loadavg, row as bench_row, run_process  # noqa: E402

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
kind, vec_path, index_path, q_path, top = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
queries = np.load(q_path)
t_import = time.perf_counter()
if kind == "exact":
    from corpusforge.tasks.sentence_embeddings.inference import top_cosines
    vectors = np.load(vec_path, mmap_mode="r")
    t_load = time.perf_counter()
    run = lambda: top_cosines(vectors, queries, top)
else:
    import faiss
    index = faiss.read_index(index_path)
    if kind == "faiss-hnsw":
        index.hnsw.efSearch = 128
    t_load = time.perf_counter()
    run = lambda: index.search(queries, top)[1]
first = run()
t_first = time.perf_counter()
inner = []
for _ in range(3):
    s = time.perf_counter(); run(); inner.append(time.perf_counter() - s)
ids = [[int(i) for i in row] for row in (first if kind != "exact" else [[i for i, _ in hits] for hits in first])]
print(json.dumps({"process": t_first - t0, "load": t_load - t_import, "inner": min(inner), "ids": ids}))
"""


def main() -> None:
    import numpy as np

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", default="1,100")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hnsw-max", type=int, default=1000000, help="skip HNSW above this size (its build time)")
    args = ap.parse_args()
    try:
        import faiss
    except ImportError:
        sys.exit("benchmarks/sentence_search.py needs faiss-cpu: .venv/bin/pip install -e '.[bench]'")
    header("embed search: exact cosine search beside faiss (flat and HNSW)")

    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="cf-search-") as tmp:
        for n in [int(s) for s in args.sizes.split(",")]:
            vec = rng.standard_normal((n, args.dim), dtype=np.float32)
            vec /= np.linalg.norm(vec, axis=1, keepdims=True)
            vec_path = Path(tmp) / f"v{n}.npy"
            np.save(vec_path, vec)
            flat = faiss.IndexFlatIP(args.dim)
            flat.add(vec)
            faiss.write_index(flat, str(Path(tmp) / f"flat{n}.faiss"))
            kinds = ["exact", "faiss-flat"]
            build = None
            if n <= args.hnsw_max:
                started = time.perf_counter()
                hnsw = faiss.IndexHNSWFlat(args.dim, 32, faiss.METRIC_INNER_PRODUCT)
                hnsw.hnsw.efConstruction = 64
                hnsw.add(vec)
                build = time.perf_counter() - started
                faiss.write_index(hnsw, str(Path(tmp) / f"hnsw{n}.faiss"))
                kinds.append("faiss-hnsw")
                del hnsw
            del flat
            for q in [int(s) for s in args.queries.split(",")]:
                queries = rng.standard_normal((q, args.dim), dtype=np.float32)
                queries /= np.linalg.norm(queries, axis=1, keepdims=True)
                q_path = Path(tmp) / f"q{q}.npy"
                np.save(q_path, queries)
                truth = np.argsort(-(queries @ vec.T), axis=1)[:, : args.top]
                got: dict[str, list] = {k: [] for k in kinds}
                ids: dict[str, list] = {}
                for _ in range(args.repeats):  # interleaved
                    for kind in kinds:
                        index_path = Path(tmp) / f"{kind.split('-')[-1]}{n}.faiss"
                        done = run_process([sys.executable, "-c", CHILD, kind, str(vec_path), str(index_path),
                                            str(q_path), str(args.top)])
                        said = {**json.loads(done.stdout.strip().splitlines()[-1]), "cpu": done.cpu}
                        got[kind].append(said)
                        ids[kind] = said["ids"]
                for kind in kinds:
                    recall = float(np.mean([len(set(a) & set(b)) / args.top for a, b in zip(ids[kind], truth.tolist())]))
                    proc = [g["process"] for g in got[kind]]
                    inner = [g["inner"] for g in got[kind]]
                    load = [g["load"] for g in got[kind]]
                    row = {"n": n, "queries": q, "kind": kind, "process_median_s": statistics.median(proc),
                           "cpu_median_s": statistics.median(g["cpu"] for g in got[kind]),
                           "process_min_s": min(proc), "load_median_s": statistics.median(load),
                           "inner_median_ms": 1000 * statistics.median(inner), "inner_min_ms": 1000 * min(inner),
                           "recall_at_10": recall, "build_s": build if kind == "faiss-hnsw" else None}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            del vec
    print(f"\nload average {loadavg()}, faiss {faiss.__version__}, numpy {np.__version__}")
    print("| N | Q | side | process median (min) s | load s | inner median (min) ms | recall@10 | build s |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        build = "" if r["build_s"] is None else f"{r['build_s']:.1f}"
        print(f"| {r['n']:,} | {r['queries']} | {r['kind']} | {r['process_median_s']:.3f} ({r['process_min_s']:.3f}) | "
              f"{r['load_median_s']:.3f} | {r['inner_median_ms']:.2f} ({r['inner_min_ms']:.2f}) | "
              f"{r['recall_at_10']:.3f} | {build} |")
    exact = {(r["n"], r["queries"]): r for r in rows if r["kind"] == "exact"}
    emit("sentence_search", [bench_row("sentence_search", f"N={r['n']} Q={r['queries']} vs {r['kind']}",
                                       "process s (median)", exact[(r["n"], r["queries"])]["process_median_s"],
                                       r["process_median_s"], note=f"recall@10 {r['recall_at_10']:.3f}")
                             for r in rows if r["kind"] != "exact"])


if __name__ == "__main__":
    main()
