"""N-gram LM estimation: corpusforge (DuckDB counting + numpy modified Kneser-Ney) next to KenLM.

Measures, for Penn Treebank (../shared/corpora/ptb) at orders 3 and 5:
- estimation time from the corpus artifact (train.parquet) to the finished model in memory (counts
  written to counts.duckdb, model estimated), excluding interpreter start-up and imports: median wall
  time and median CPU time (all threads) of --repeat runs, each in a fresh subprocess;
- peak memory: the subprocess's peak RSS minus its RSS after the imports;
- the test/valid perplexities against KenLM's reference figures (../shared/DATA.md);
- scoring speed on ptb.test: the `kenlm` Python module on our exported ARPA vs our numpy scorer.

KenLM's `lmplz` binary is not on PyPI; when it is not on PATH the estimation anchor is the issue's
reference figure (lmplz: 1.7-2.6 s for the PTB 5-gram on this class of machine).

Usage: .venv/bin/python benchmarks/ngram_vs_kenlm.py [--repeat 3] [--orders 3 5] [--threads 0]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PTB = REPO.parent / "shared" / "corpora" / "ptb"
KENLM_PPL = {3: {"test": 148.2815, "valid": 157.7653}, 5: {"test": 141.1862, "valid": 148.0074}}
LMPLZ_REFERENCE_O5 = (1.7, 2.6)

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
from tasks.ngram import NgramConfig, estimate_from_corpus
import duckdb, numpy  # imports are not part of the measurement
def rss_kb():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1])
base = rss_kb()
cfg = NgramConfig(order={order}, smoothing='modified-kneser-ney', threads={threads})
out = Path({out!r}); out.mkdir(parents=True, exist_ok=True)
marks = []
w0, c0 = time.perf_counter(), time.process_time()
model, summary, tables = estimate_from_corpus(Path({corpus!r}), out, cfg,
                                              on_progress=lambda d, t: marks.append(time.process_time()))
w1, c1 = time.perf_counter(), time.process_time()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"wall": w1 - w0, "cpu": c1 - c0, "cpu_count": marks[0] - c0, "cpu_read_estimate": marks[1] - marks[0],
                  "peak_mb": (peak - base) / 1024, "ngrams": sum(len(c) for _, c in tables)}}))
"""


def build_corpus_artifact(store_root: Path) -> Path:
    from storage.store import ArtifactStore
    from tasks.corpus import build_corpus, corpus_config_from_dict, resolve_sources
    from tasks.corpus_shard import build_corpus_shard

    cfg = corpus_config_from_dict({"name": "ptb-train", "sources": [str(PTB / "ptb.train.txt")],
                                   "reader": {"txt_mode": "line"}, "clean": {"preset": "raw"},
                                   "dedup": {"exact": False}, "split": {"valid": 0, "test": 0},
                                   "validate": {"max_chars": 100_000_000}})
    store = ArtifactStore(store_root)
    shards = [build_corpus_shard(r, cfg, store) for r in resolve_sources(cfg)]
    return Path(build_corpus(shards, cfg, store).path)


def measure(corpus: Path, order: int, repeat: int, threads: int, tmp: Path) -> dict:
    runs = []
    for i in range(repeat):
        out = tmp / f"o{order}-{i}"
        code = CHILD.format(repo=str(REPO), order=order, threads=threads, out=str(out), corpus=str(corpus))
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
        shutil.rmtree(out, ignore_errors=True)
    return {"wall_median": statistics.median(r["wall"] for r in runs), "wall_min": min(r["wall"] for r in runs),
            "cpu_median": statistics.median(r["cpu"] for r in runs),
            "cpu_count_median": statistics.median(r["cpu_count"] for r in runs),
            "cpu_read_estimate_median": statistics.median(r["cpu_read_estimate"] for r in runs),
            "peak_mb_median": statistics.median(r["peak_mb"] for r in runs), "ngrams": runs[0]["ngrams"], "runs": runs}


def lmplz_time(order: int, tmp: Path) -> float | None:
    lmplz = shutil.which("lmplz")
    if lmplz is None:
        return None
    text = (PTB / "ptb.train.txt").read_text().replace("<unk>", "_unk_")
    (tmp / "train_r.txt").write_text(text)
    t = time.perf_counter()
    subprocess.run([lmplz, "-o", str(order), "--text", str(tmp / "train_r.txt"), "--arpa", str(tmp / "lmplz.arpa")],
                   check=True, capture_output=True)
    return time.perf_counter() - t


def quality_and_query_speed(corpus: Path, order: int, tmp: Path) -> dict:
    from models.ngram_arpa import write_arpa
    from tasks.ngram import NgramConfig, estimate_from_corpus, read_sentences

    out = tmp / f"q{order}"
    out.mkdir()
    model, _, _ = estimate_from_corpus(corpus, out, NgramConfig(order=order))
    result = {}
    for split in ("test", "valid"):
        ev = model.evaluate(list(read_sentences(PTB / f"ptb.{split}.txt")))
        result[f"{split}_ppl"] = ev["perplexity"]
        result[f"{split}_rel_err"] = ev["perplexity"] / KENLM_PPL[order][split] - 1
    test = list(read_sentences(PTB / "ptb.test.txt"))
    t = time.perf_counter()
    write_arpa(model, out / "m.arpa")
    result["arpa_write_s"] = time.perf_counter() - t
    t = time.perf_counter()
    model.evaluate(test)
    result["ours_score_test_s"] = time.perf_counter() - t
    try:
        import kenlm
    except ImportError:
        return result
    t = time.perf_counter()
    ken = kenlm.Model(str(out / "m.arpa"))
    result["kenlm_load_arpa_s"] = time.perf_counter() - t
    lines = [" ".join(s) for s in test]
    t = time.perf_counter()
    total = sum(ken.score(s) for s in lines)
    result["kenlm_score_test_s"] = time.perf_counter() - t
    result["kenlm_test_ppl_on_our_arpa"] = 10 ** (-total / sum(len(s) + 1 for s in test))
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--orders", type=int, nargs="+", default=[3, 5])
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if not PTB.exists():
        sys.exit(f"needs {PTB}")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    with tempfile.TemporaryDirectory(prefix="ngram-bench-") as d:
        tmp = Path(d)
        corpus = build_corpus_artifact(tmp / "store")
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
        for order in args.orders:
            m = measure(corpus, order, args.repeat, args.threads, tmp)
            lm = lmplz_time(order, tmp)
            q = quality_and_query_speed(corpus, order, tmp)
            anchor = (f"lmplz {lm:.2f} s (measured)" if lm else
                      f"lmplz not on PATH; issue reference for order 5: {LMPLZ_REFERENCE_O5[0]}-{LMPLZ_REFERENCE_O5[1]} s")
            print(f"\norder {order}: {m['ngrams']:,} n-grams")
            print(f"  corpusforge estimate (artifact -> model): wall median {m['wall_median']:.2f} s "
                  f"(min {m['wall_min']:.2f}), CPU {m['cpu_median']:.2f} s (DuckDB counting "
                  f"{m['cpu_count_median']:.2f}, reading counts + estimate {m['cpu_read_estimate_median']:.2f}), "
                  f"peak +{m['peak_mb_median']:.0f} MB")
            print(f"  anchor: {anchor}")
            if lm:
                print(f"  ratio ours/lmplz (wall median): {m['wall_median'] / lm:.2f}x")
            elif order == 5:
                print(f"  ratio ours/lmplz reference: {m['wall_median'] / LMPLZ_REFERENCE_O5[1]:.2f}x - "
                      f"{m['wall_median'] / LMPLZ_REFERENCE_O5[0]:.2f}x")
            print(f"  perplexity test {q['test_ppl']:.4f} (KenLM {KENLM_PPL[order]['test']}, {q['test_rel_err']:+.5%}), "
                  f"valid {q['valid_ppl']:.4f} (KenLM {KENLM_PPL[order]['valid']}, {q['valid_rel_err']:+.5%})")
            print(f"  ARPA export {q['arpa_write_s']:.2f} s; scoring ptb.test: ours {q['ours_score_test_s']:.3f} s"
                  + (f", kenlm python {q['kenlm_score_test_s']:.3f} s (ARPA load {q['kenlm_load_arpa_s']:.2f} s), "
                     f"kenlm ppl on our ARPA {q['kenlm_test_ppl_on_our_arpa']:.4f}" if "kenlm_score_test_s" in q else ""))
            print(json.dumps({"order": order, **{k: v for k, v in m.items() if k != "runs"}, "lmplz_s": lm, **q}))
        print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
