"""Step ``encode``: a corpus, encoded with a tokenizer artifact, as token-id shards per split.

Format ``bin`` (nanoGPT style): ``train.bin``, ``valid.bin``, ``test.bin``, flat little-endian token ids
(uint16 when vocab_size <= 65535, else uint32), documents in corpus order, each followed by the
end-of-text id when the tokenizer has one. Readers use ``numpy.memmap(path, dtype=meta["dtype"], mode="r")``.
Format ``parquet``: ``<split>.parquet`` with ``doc_id`` and ``ids`` (one list per document, no eot). A corpus
with named fields (``fields: [src, tgt]``) gets one ``<field>_ids`` column per field instead
(storage/records.py ``ids_column``), and the ``labels`` columns as they are. ``add_special_tokens`` wraps each
document (each field) in the tokenizer's template (``[CLS] ... [SEP]``, ``<s> ... </s>``); eot still follows it.
``meta.json``: dtype, vocab_size, eot_id, tokenizer_id, tokenizer_path, tokens and documents per split; with
roles, ``special_ids`` (role -> id: pad, mask, ... as models derive them); with fields, ``fields`` (field -> column)
and ``labels``. A config without roles, fields, labels or templates writes the bytes it wrote before them.

The id follows from (step, version, format) and the input ids: the corpus id and the tokenizer id.
Parallelism: HF-backed tokenizers encode each batch on all cores (Rust threads); classic BPE (Python)
encodes batches in a process pool.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from corpusforge.storage.records import ids_column
from corpusforge.storage.store import ArtifactStore, store_relative
from corpusforge.tasks.config import identity
from corpusforge.tasks.corpus.split import SPLITS
from corpusforge.tasks.step import StepResult, artifact_input, run_step

ENCODE_STEP = "encode"
ENCODE_VERSION = 2  # 2: meta.json records the tokenizer path relative to the store (same bytes in any store)
BATCH_DOCS = 2000
_WORKER_TOKENIZER = None


def dtype_for(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 65535 else "uint32"


def build_encode(corpus: StepResult, tokenizer: StepResult, cfg, store: ArtifactStore) -> StepResult:
    """``cfg`` is a TokenizerConfig (its ``format`` and ``workers`` matter here; workers never change output)."""
    return run_step(store, step=ENCODE_STEP, version=ENCODE_VERSION, name=cfg.name, config=identity(cfg, "encode"),
                    inputs=[artifact_input(corpus), artifact_input(tokenizer)],
                    build=lambda out: _build(out, corpus, tokenizer, cfg),
                    libraries=("tokenizers", "numpy", "polars"))


def check_columns(path: Path, wanted: Sequence[str]) -> None:
    """A corpus split without a column the config names: a ValueError naming it and the columns there are."""
    import pyarrow.parquet as pq

    have = pq.read_schema(path).names
    missing = [c for c in wanted if c not in have]
    if missing:
        raise ValueError(f"{path.parent.name}/{path.name}: no column {missing[0]!r} (tokenizer.fields/labels); "
                         f"it has {', '.join(have)}")


def _init_worker(tokenizer_dir: str) -> None:
    global _WORKER_TOKENIZER
    from corpusforge.models.tokenization import load_tokenizer

    _WORKER_TOKENIZER = load_tokenizer(tokenizer_dir)


def _encode_in_worker(job: tuple[list[str], bool]) -> list[list[int]]:
    texts, add_special_tokens = job
    return _WORKER_TOKENIZER.encode_batch(texts, add_special_tokens)


def _batches(texts: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(texts), BATCH_DOCS):
        yield texts[i:i + BATCH_DOCS]


def encode_documents(tok, tokenizer_dir: str, texts: list[str], workers: int,
                     add_special_tokens: bool = False) -> Iterator[list[list[int]]]:
    """Encoded batches of documents, in order."""
    if tok.kind == "classic-bpe" and workers > 1 and len(texts) > BATCH_DOCS:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")  # never fork a process that runs Prefect threads
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(tokenizer_dir,)) as ex:
            yield from ex.map(_encode_in_worker, ((b, add_special_tokens) for b in _batches(texts)))
        return
    for batch in _batches(texts):
        yield tok.encode_batch(batch, add_special_tokens)


def _build(out: Path, corpus: StepResult, tokenizer: StepResult, cfg) -> dict[str, Any]:
    import numpy as np
    import polars as pl

    from corpusforge.models.tokenization import load_tokenizer

    tok = load_tokenizer(tokenizer.path)
    dtype = dtype_for(tok.vocab_size)
    eot = tok.eot_id
    workers = cfg.workers or os.cpu_count() or 1
    add = cfg.add_special_tokens
    fields = list(cfg.fields) or ["text"]
    # the column each field's ids go to: `ids` for the plain `text` corpus, as before named fields existed
    columns = {f: ids_column(f) for f in cfg.fields} or {"text": "ids"}
    tokens: dict[str, int] = {}
    field_tokens: dict[str, dict[str, int]] = {}
    documents: dict[str, int] = {}
    start = time.perf_counter()
    n_bytes = 0
    for split in SPLITS:
        path = Path(corpus.path) / f"{split}.parquet"
        if path.exists():
            check_columns(path, [*fields, *cfg.labels])
        frame = pl.read_parquet(path, columns=["doc_id", *fields, *cfg.labels]) if path.exists() else None
        documents[split] = frame.height if frame is not None else 0
        tokens[split] = 0
        if cfg.format == "bin":
            texts = frame["text"].to_list() if frame is not None else []
            n_bytes += sum(len(t.encode("utf-8")) for t in texts)
            with open(out / f"{split}.bin", "wb") as fh:
                for batch in encode_documents(tok, tokenizer.path, texts, workers, add):
                    flat = [i for ids in batch for i in ((*ids, eot) if eot is not None else ids)]
                    arr = np.asarray(flat, dtype=dtype)
                    arr.astype(arr.dtype.newbyteorder("<"), copy=False).tofile(fh)
                    tokens[split] += len(flat)
            continue
        list_type = pl.List(pl.UInt16 if dtype == "uint16" else pl.UInt32)
        data = {"doc_id": frame["doc_id"] if frame is not None else []}
        field_tokens[split] = {}
        for f in fields:
            texts = frame[f].fill_null("").to_list() if frame is not None else []
            n_bytes += sum(len(t.encode("utf-8")) for t in texts)
            encoded = [ids for batch in encode_documents(tok, tokenizer.path, texts, workers, add) for ids in batch]
            field_tokens[split][f] = sum(len(ids) for ids in encoded)
            data[columns[f]] = pl.Series(columns[f], encoded, dtype=list_type)
        tokens[split] = sum(field_tokens[split].values())
        for label in cfg.labels:  # passed through as the corpus has them (type included)
            data[label] = frame[label] if frame is not None else []
        pl.DataFrame(data).write_parquet(out / f"{split}.parquet")
    seconds = time.perf_counter() - start
    meta: dict[str, Any] = {"dtype": dtype, "vocab_size": tok.vocab_size, "eot_id": eot, "tokenizer_id": tokenizer.id,
                            "tokenizer_path": store_relative(tokenizer.path, Path(out).resolve().parent.parent),
                            "corpus_id": corpus.id, "format": cfg.format, "tokens": tokens,
                            "documents": documents}
    # each key below only when its feature is used: a config without them writes the meta.json it wrote before
    if tok.roles:
        meta["special_ids"] = tok.role_ids
    if add:
        meta["add_special_tokens"] = True
    if cfg.fields:
        meta.update(fields=columns, labels=list(cfg.labels), field_tokens=field_tokens)
    elif cfg.labels:
        meta["labels"] = list(cfg.labels)
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    metrics = {f"tokens_{s}": n for s, n in tokens.items()}
    metrics.update({f"docs_{s}": n for s, n in documents.items()})
    metrics.update(encode_seconds=seconds, encode_mb_per_s=n_bytes / 1e6 / seconds if seconds > 0 else 0.0)
    return {"metrics": metrics, "meta": meta}
