"""Corpus-stage throughput: corpusforge's shard + merge steps next to a straightforward per-document
Python implementation of the same work, in one run.

    .venv/bin/python benchmarks/corpus_throughput.py [--mb 200] [--minhash-mb 20] [--workdir DIR]

The corpus is built from ../shared (PTB, Tiny Shakespeare): .txt, .jsonl, .csv and .txt.gz files with
injected exact duplicates (~10%), near duplicates (~5%) and noise (invalid UTF-8 lines, control
characters, blank lines). Work measured, both sides: ingest + `lm` cleaning (NFC, whitespace) +
empty filter + exact dedup + length validation + Parquet output; then the same with MinHash LSH
near-dedup (datasketch for the baseline). MB/s per core = input MB / CPU seconds (user + sys of all
threads, via getrusage), so multi-threaded libraries get no free ride; wall-clock MB/s is shown too.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import platform
import random
import re
import resource
import shutil
import sys
import time
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT))


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def build_corpus(workdir: Path, target_mb: float, seed: int = 0) -> tuple[Path, int]:
    rng = random.Random(seed)
    base = []
    for rel in ("corpora/ptb/ptb.train.txt", "corpora/tinyshakespeare/input.txt"):
        base += [line for line in (SHARED / rel).read_text(encoding="utf-8").split("\n") if line.strip()]
    src = workdir / "corpus"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    target = int(target_mb * 1e6)
    written, part = 0, 0
    seen: list[str] = []
    while written < target:
        part += 1
        lines = []
        for _ in range(50_000):
            r = rng.random()
            if r < 0.10 and seen:
                line = rng.choice(seen)  # exact duplicate
            elif r < 0.15 and seen:
                words = rng.choice(seen).split()
                words[rng.randrange(len(words))] = "perturbed"  # near duplicate
                line = " ".join(words)
            else:
                words = rng.choice(base).split()
                rng.shuffle(words)
                line = " ".join(words + rng.sample(base, 1)[0].split()[:8])
                if len(seen) < 20_000:
                    seen.append(line)
            if rng.random() < 0.002:
                line = line + " \x07bell"
            lines.append(line)
        kind = ("txt", "jsonl", "csv", "txt.gz")[part % 4]
        path = src / f"part{part:04d}.{kind}"
        if kind == "txt":
            data = ("\n".join(lines) + "\n\n").encode() + b"caf\xe9 latin-1 noise\n"
        elif kind == "jsonl":
            data = "".join(json.dumps({"text": t, "part": part}) + "\n" for t in lines).encode()
        elif kind == "csv":
            data = ("text,part\n" + "".join('"' + t.replace('"', '""') + f'",{part}\n' for t in lines)).encode()
        else:
            data = gzip.compress(("\n".join(lines) + "\n").encode(), compresslevel=1)
        path.write_bytes(data)
        written += len(("\n".join(lines)).encode())
    return src, written


def run_corpusforge(src: Path, store: Path, near: bool) -> dict:
    from storage.store import ArtifactStore
    from tasks.corpus import build_corpus as merge, corpus_config_from_dict, resolve_sources
    from tasks.corpus_shard import build_corpus_shard

    shutil.rmtree(store, ignore_errors=True)
    cfg = corpus_config_from_dict({
        "name": "bench", "sources": [str(src)], "reader": {"txt_mode": "line"},
        "validate": {"min_chars": 1, "max_chars": 100_000, "data_docs": False},
        "dedup": {"exact": True, "near": {"enabled": near}}, "split": {"valid": 0.0, "test": 0.0},
    })
    st = ArtifactStore(store)
    c0, w0 = cpu_seconds(), time.perf_counter()
    shards = [build_corpus_shard(r, cfg, st) for r in resolve_sources(cfg)]
    result = merge(shards, cfg, st)
    cpu, wall = cpu_seconds() - c0, time.perf_counter() - w0
    manifest = json.loads((Path(result.path) / "manifest.json").read_text())
    return {"cpu": cpu, "wall": wall, "kept": manifest["accounting"]["kept"],
            "read": manifest["accounting"]["records_read"], "dedup": manifest["accounting"]["deduplicated"]}


WS = re.compile(r"[^\S\n]+")


def run_baseline(src: Path, out: Path, near: bool) -> dict:
    """The same steps, one document at a time, the way a first script would do it."""
    import csv
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    c0, w0 = cpu_seconds(), time.perf_counter()
    docs, seen, read, kept = [], set(), 0, 0
    rows: dict[str, list] = {k: [] for k in ("doc_id", "source", "locator", "split", "n_chars", "n_words", "hash")}
    quarantine: list[tuple[str, str, str]] = []
    for path in sorted(src.iterdir()):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        raw = gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()
        if path.suffix == ".csv":
            cells = [r[0] for r in list(csv.reader(io.StringIO(raw.decode("utf-8", "replace"))))[1:]]
            items = [c.encode() for c in cells]
        else:
            items = raw.split(b"\n")
            if items and items[-1] == b"":
                items.pop()
        for lineno, item in enumerate(items, start=1):
            read += 1
            locator = f"line:{lineno}"
            try:
                text = item.decode("utf-8")
            except UnicodeDecodeError:
                quarantine.append((path.name, locator, "invalid_utf8"))
                continue
            if path.suffix == ".jsonl":
                try:
                    text = json.loads(text)["text"]
                except (ValueError, KeyError):
                    quarantine.append((path.name, locator, "invalid_json"))
                    continue
            text = unicodedata.normalize("NFC", text)
            text = "".join(ch for ch in text if ch in "\t\n\r" or ord(ch) >= 32)
            text = WS.sub(" ", text).strip()
            if not text or len(text) > 100_000:
                continue
            h = hashlib.md5(text.encode()).hexdigest()
            if h in seen:
                continue
            seen.add(h)
            doc_id = hashlib.sha256(f"{path.name}\x1f{digest}\x1f{locator}".encode()).hexdigest()[:20]
            u = int(hashlib.md5(f"0:{doc_id}".encode()).hexdigest()[:8], 16) / 2**32
            for key, value in (("doc_id", doc_id), ("source", path.name), ("locator", locator),
                               ("split", "valid" if u < 0.05 else "test" if u < 0.1 else "train"),
                               ("n_chars", len(text)), ("n_words", len(text.split())), ("hash", h)):
                rows[key].append(value)
            docs.append(text)
    if near:
        from datasketch import MinHash, MinHashLSH

        lsh = MinHashLSH(threshold=0.8, num_perm=128)
        keep = []
        for i, text in enumerate(docs):
            words = text.split()
            m = MinHash(num_perm=128)
            for j in range(max(1, len(words) - 4)):
                m.update(" ".join(words[j:j + 5]).encode())
            if not lsh.query(m):
                lsh.insert(str(i), m)
                keep.append(i)
        docs = [docs[i] for i in keep]
        rows = {k: [v[i] for i in keep] for k, v in rows.items()}
    kept = len(docs)
    pq.write_table(pa.table({**rows, "text": docs}), out / "baseline.parquet", compression="zstd")
    pq.write_table(pa.table({"source": [q[0] for q in quarantine], "locator": [q[1] for q in quarantine],
                             "reason": [q[2] for q in quarantine]}), out / "baseline_quarantine.parquet")
    return {"cpu": cpu_seconds() - c0, "wall": time.perf_counter() - w0, "kept": kept, "read": read}


def minhash_libraries(n_docs: int = 20_000) -> None:
    """Signature throughput of the two MinHash libraries the issue names, on the same shingle sets."""
    from datasketch import MinHash
    from rensa import RMinHash

    from tasks.near_dedup import shingles

    rng = random.Random(1)
    base = (SHARED / "corpora/ptb/ptb.train.txt").read_text().split("\n")
    texts = [" ".join(rng.choice(base).split() + rng.choice(base).split()) for _ in range(n_docs)]
    sets = [shingles(t, 5) for t in texts]
    c0 = cpu_seconds()
    for tokens in sets:
        m = MinHash(num_perm=128, seed=1)
        m.update_batch([t.encode() for t in tokens])
    datasketch_cpu = cpu_seconds() - c0
    c0 = cpu_seconds()
    RMinHash.digest_matrix_from_token_sets(sets, 128, 1)
    rensa_cpu = cpu_seconds() - c0
    print(f"\n== MinHash signatures, {n_docs:,} docs, 128 permutations (CPU seconds)")
    print(f"  datasketch (update_batch per doc) {datasketch_cpu:6.2f}s   rensa (batch matrix) {rensa_cpu:6.2f}s   "
          f"ratio {datasketch_cpu / rensa_cpu:.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200.0, help="corpus size (MB of text)")
    ap.add_argument("--minhash-mb", type=float, default=20.0, help="corpus size for the MinHash comparison")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/corpusforge-bench"))
    args = ap.parse_args()
    if not SHARED.is_dir():
        sys.exit(f"needs ../shared next to the repository ({SHARED})")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations  # noqa: F401  - import once, outside the timings

    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    for label, mb, near in (("exact dedup", args.mb, False), ("with MinHash", args.minhash_mb, True)):
        src, nbytes = build_corpus(args.workdir / label.replace(" ", "_"), mb)
        size = nbytes / 1e6
        ours = run_corpusforge(src, args.workdir / "store", near)
        base = run_baseline(src, args.workdir, near)
        print(f"\n== {label}: {size:.0f} MB, {ours['read']:,} records")
        for name, r in (("corpusforge", ours), ("per-document Python", base)):
            print(f"  {name:20s} {size / r['cpu']:6.1f} MB/s per core   {size / r['wall']:6.1f} MB/s wall   "
                  f"cpu {r['cpu']:6.1f}s  wall {r['wall']:6.1f}s  kept {r['kept']:,}")
        print(f"  ratio (per core): {base['cpu'] / ours['cpu']:.1f}x   dedup: {ours['dedup']}")
    minhash_libraries()


if __name__ == "__main__":
    main()
