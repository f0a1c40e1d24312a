"""``corpusforge embed sentences`` and ``embed search``: a trained sentence encoder (the sentence_embeddings stage)
embeds the lines of a file, or finds the lines nearest a query. Registered on the ``embed`` group by
corpusforge.cli; they read a published artifact through the catalog and never start Prefect."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from corpusforge.cli.common import JsonOpt, StoreOpt, _fail, _find_step_artifact, out, print_json

STEP = "sentence_embeddings"


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


def search(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="sentence_embeddings artifact id or unique prefix.")],
    query: Annotated[str, typer.Argument(metavar="QUERY", help="The sentence to look for.")],
    corpus: Annotated[Path, typer.Option("--corpus", metavar="FILE", help=(
        "The sentences searched, one per line (embedded once, then kept in the store's scratch for the next "
        "search over the same file)."))],
    top: Annotated[int, typer.Option("--top", min=1, help="How many nearest sentences to show.")] = 10,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The lines of --corpus nearest QUERY by cosine similarity: an exact search (one pass over the kept vectors,
    memory-mapped), measured faster per call than loading an approximate index up to a million sentences."""
    found, embedder = _encoder(artifact_id, store)
    lines = _lines(corpus)
    vectors, cached = _index(found, embedder, corpus, lines)
    hits = embedder.search(query, vectors, top)
    rows = [{"rank": r + 1, "line": i + 1, "score": score, "text": lines[i]} for r, (i, score) in enumerate(hits)]
    if as_json:
        print_json({"id": found.manifest["id"], "query": query, "corpus": str(corpus), "sentences": len(lines),
                    "index_reused": cached, "hits": rows}, ensure_ascii=False)
        return
    for row in rows:
        out.print(f"{row['rank']:>3}  {row['score']:.4f}  line {row['line']:<6} {row['text']}", highlight=False)
