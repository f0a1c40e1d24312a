"""``corpusforge embed sentences`` and ``embed search``: a trained sentence encoder (the sentence_embeddings stage)
embeds the lines of a file, or finds the lines nearest a query: by the encoder's cosine (``--mode dense``), by BM25
(``--mode bm25``, no encoder needed: corpusforge.models.retrieval over bm25s) or by both fused by reciprocal rank
(``--mode hybrid``). Registered on the ``embed`` group by corpusforge.cli; they read a published artifact through
the catalog and never start Prefect."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from corpusforge.cli.common import (JsonOpt, StoreOpt, _fail, _find_step_artifact, _reading, _store, choices, out,
                                   print_json)

STEP = "sentence_embeddings"
SearchMode = choices("SearchMode", ("dense", "bm25", "hybrid"))


def _encoder(artifact_id: str, store: Optional[str]):
    from corpusforge.tasks.sentence_embeddings.inference import load_embedder

    found = _find_step_artifact(artifact_id, store, STEP, f"a sentence encoder ({STEP}: train one with a "
                                "sentence_embeddings section)")
    try:
        return found, load_embedder(found.path)
    except (OSError, ValueError) as exc:
        _fail(f"{found.path}: cannot load the model: {exc}", 1)


def _lines(path: Path) -> list[str]:
    from corpusforge.storage.formats import text_lines

    if not path.is_file():
        _fail(f"{path}: no such file", 2)
    try:
        lines = text_lines(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        _fail(f"{path}: line {line} is not UTF-8", 2)
    if not lines:
        _fail(f"{path}: no lines to embed", 2)
    return lines


def sentences(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="sentence_embeddings artifact id or unique prefix.")],
    file: Annotated[Path, typer.Argument(metavar="FILE", help="Sentences, one per line.")],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", metavar="OUT.npy|OUT.parquet", help=(
        "Where the vectors go: .npy (an (N, dim) float32 array, rows in line order) or .parquet (columns text, "
        "vector). Default: FILE's name with .npy."))] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Embed every line of FILE with a trained sentence encoder: one unit-length vector per line (cosine similarity
    is their dot product)."""
    import time

    found, embedder = _encoder(artifact_id, store)
    lines = _lines(file)
    started = time.perf_counter()
    vectors = embedder.encode(lines)
    seconds = time.perf_counter() - started
    target = output or file.with_suffix(".npy")
    if target.suffix == ".parquet":
        import polars as pl

        pl.DataFrame({"text": lines, "vector": vectors.tolist()}).write_parquet(target)
    elif target.suffix == ".npy":
        import numpy as np

        np.save(target, vectors, allow_pickle=False)
    else:
        _fail(f"--output {target}: write .npy or .parquet", 2)
    result = {"id": found.manifest["id"], "file": str(file), "output": str(target), "sentences": len(lines),
              "dim": int(vectors.shape[1]), "seconds": seconds}
    if as_json:
        print_json(result)
        return
    out.print(f"{len(lines)} sentences -> {target} ({vectors.shape[1]} dimensions, unit length; {seconds:.1f} s)",
              highlight=False)


def _index(found, embedder, corpus: Path, lines: list[str]):
    """The corpus's vectors: computed once per (model, file content) and kept in the store's scratch, so the next
    search over the same file only embeds the query."""
    import numpy as np

    digest = hashlib.sha256(corpus.read_bytes()).hexdigest()[:32]
    cache = Path(found.path).parents[1] / ".scratch" / "sentence_index"
    path = cache / f"{found.manifest['id'][:32]}-{digest}.npy"
    if path.is_file():
        vectors = np.load(path, mmap_mode="r", allow_pickle=False)
        if vectors.shape == (len(lines), embedder.dim):
            return vectors, True
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npy")
    # encoded block by block into the memory-mapped file (issue 44, item 12): tokenizing a million lines at once
    # peaked at 7 GB; now the peak is one block's, whatever the file's length
    out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(len(lines), embedder.dim))
    try:
        for start in range(0, len(lines), INDEX_BLOCK):
            out[start:start + INDEX_BLOCK] = embedder.encode(lines[start:start + INDEX_BLOCK])
        out.flush()
        del out
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return np.load(path, mmap_mode="r", allow_pickle=False), False


INDEX_BLOCK = 8192  # lines embedded at a time for a search index


def _bm25_index(root: Path, corpus: Path, lines: list[str]):
    """The corpus's BM25 index (models/retrieval.py, bm25s): built once per file content and kept in the store's
    scratch (``.scratch/bm25_index/<sha256[:32]>/``, .npy arrays and JSON, no pickle), so the next search over the
    same file only tokenizes the query. A kept index that does not load, or was built with other settings, is
    rebuilt."""
    import shutil

    from corpusforge.models.retrieval import BM25Index

    digest = hashlib.sha256(corpus.read_bytes()).hexdigest()[:32]
    path = root / ".scratch" / "bm25_index" / digest
    if path.is_dir():
        try:
            kept = BM25Index.load(path)
        except (OSError, ValueError, KeyError):
            kept = None
        if kept is not None and len(kept) == len(lines) and all(
                kept.settings.get(k) == v for k, v in BM25_SETTINGS.items()):
            return kept, True
    try:
        index = BM25Index.build(lines, **BM25_SETTINGS)
    except ValueError as exc:  # every line empty or stop words only
        _fail(f"{corpus}: {exc}", 2)
    tmp = path.with_name(f"{digest}.{os.getpid()}.tmp")
    try:
        index.save(tmp)
        shutil.rmtree(path, ignore_errors=True)  # a kept index that did not load
        try:
            tmp.replace(path)
        except OSError:  # another search put its copy there first: the same content
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return index, False


BM25_SETTINGS = {"k1": 1.5, "b": 0.75, "method": "lucene", "stopwords": "en", "stemmer": True}


def _weights(given: Optional[str]) -> tuple[float, float]:
    """--weights W_BM25,W_DENSE as two non-negative numbers, not both 0."""
    import math

    try:
        weights = tuple(float(w) for w in given.split(","))
    except ValueError:
        weights = ()
    if len(weights) != 2 or not all(math.isfinite(w) and w >= 0 for w in weights) or not any(weights):
        _fail(f"--weights {given}: give two non-negative numbers W_BM25,W_DENSE, not both 0 (e.g. 1,1)", 2)
    return weights


def search(
    corpus: Annotated[Path, typer.Option("--corpus", metavar="FILE", help=(
        "The sentences searched, one per line (embedded or BM25-indexed once, then kept in the store's scratch "
        "for the next search over the same file)."))],  # first: the one parameter without a default
    artifact_id: Annotated[Optional[str], typer.Argument(metavar="ID", help=(
        "sentence_embeddings artifact id or unique prefix: needed by --mode dense and hybrid, not by bm25 (which "
        "may be called as `embed search QUERY --corpus FILE --mode bm25`).")
    )] = None,
    query: Annotated[Optional[str], typer.Argument(metavar="QUERY", help="The sentence to look for.")] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="How many nearest sentences to show.")] = 10,
    mode: Annotated[SearchMode, typer.Option("--mode", help=(
        "dense: the encoder's cosine similarity; bm25: BM25 word matching (bm25s, Lucene's formula, English stop "
        "words and stemming; no encoder); hybrid: both, fused by reciprocal rank (k 60, each side's top 100)."))
    ] = SearchMode.dense,
    weights: Annotated[Optional[str], typer.Option("--weights", metavar="W_BM25,W_DENSE", help=(
        "--mode hybrid: the fusion's weight of each side (default 1,1)."))] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The lines of --corpus nearest QUERY: by cosine similarity (an exact search, one pass over the kept vectors,
    memory-mapped, measured faster per call than loading an approximate index up to a million sentences), by BM25,
    or by both fused (reciprocal rank fusion)."""
    mode = SearchMode(mode).value
    if query is None:  # one positional: the query (what --mode bm25 needs)
        artifact_id, query = None, artifact_id
    if query is None:
        _fail("give QUERY: embed search [ID] QUERY --corpus FILE", 2)
    if mode != "bm25" and artifact_id is None:
        _fail(f"--mode {mode} needs ID, a sentence_embeddings artifact (embed search ID QUERY --corpus FILE); "
              "--mode bm25 needs none", 2)
    if weights is not None and mode != "hybrid":
        _fail(f"--weights applies to --mode hybrid, not {mode}", 2)
    fusion = _weights(weights) if weights is not None else (1.0, 1.0)
    if mode == "bm25":
        root = _store(store)
        lines = _lines(corpus)
        _reading(root)
        index, cached = _bm25_index(root, corpus, lines)
        hits, model_id = index.search([query], top)[0], None
    else:
        found, embedder = _encoder(artifact_id, store)
        lines = _lines(corpus)
        vectors, cached = _index(found, embedder, corpus, lines)
        model_id = found.manifest["id"]
        if mode == "dense":
            hits = embedder.search(query, vectors, top)
        else:
            from corpusforge.models.retrieval import Retriever

            index, lexical_cached = _bm25_index(Path(found.path).parents[1], corpus, lines)
            cached = cached and lexical_cached
            hits = Retriever(lines, "hybrid", embedder=embedder, bm25=index, vectors=vectors,
                             weights=fusion).search([query], top)[0]
    rows = [{"rank": r + 1, "line": i + 1, "score": score, "text": lines[i]} for r, (i, score) in enumerate(hits)]
    if as_json:
        print_json({"id": model_id, "query": query, "corpus": str(corpus), "sentences": len(lines), "mode": mode,
                    "index_reused": cached, "hits": rows}, ensure_ascii=False)
        return
    if not rows:
        out.print(f"no line of {corpus} shares a word with the query", highlight=False)
    for row in rows:
        out.print(f"{row['rank']:>3}  {row['score']:.4f}  line {row['line']:<6} {row['text']}", highlight=False)
