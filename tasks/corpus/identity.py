"""Per-document identity: doc_id, content hash and split, vectorized in DuckDB with Python references.

- ``doc_id = sha256(source name, US, source digest, US, locator)[:20]`` (US = U+001F): stable, derived
  from the source's digest and the record's locator, distinct for byte-identical copies of a file.
- ``content_hash = md5(cleaned text)``: a stable 128-bit key for exact dedup, also across runs.
- ``split``: ``u = int(md5(f"{seed}:{doc_id}")[:8], 16) / 2**32``; valid if u < valid, test if
  u < valid + test, else train. It depends on nothing but the doc_id and the seed, so appending files
  never moves an existing document.

The Python functions are the definitions; the DuckDB path computes exactly the same values for whole
columns at C speed (tests check they agree).
"""

from __future__ import annotations

import hashlib
import threading

from corpusforge.tasks.corpus.split import SplitConfig, assign_split

SEP = "\x1f"
SMALL_FRAME = 1000  # rows up to which hashlib in Python beats DuckDB's start (~3 us a row vs 25-45 ms a call)


def doc_id_for(source_name: str, source_digest: str, locator: str) -> str:
    return hashlib.sha256(f"{source_name}{SEP}{source_digest}{SEP}{locator}".encode()).hexdigest()[:20]


def content_hash_for(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def split_for(doc_id: str, cfg: SplitConfig) -> str:
    return assign_split(doc_id, cfg)


_PER_THREAD = threading.local()
_DATABASE: list = []  # (pid, the process's in-memory DuckDB database), made on first use
_DATABASE_LOCK = threading.Lock()


def _connection():
    """This thread's cursor on the process's in-memory DuckDB database: one database per process (opening
    one costs 15-45 ms; a shard needs one query), a cursor per thread (a DuckDB connection is not shared by
    threads; a cursor costs nothing). A forked process opens its own."""
    import os

    import duckdb

    con = getattr(_PER_THREAD, "con", None)
    if con is None or _PER_THREAD.pid != os.getpid():
        with _DATABASE_LOCK:
            if not _DATABASE or _DATABASE[0][0] != os.getpid():
                _DATABASE[:] = [(os.getpid(), duckdb.connect())]
            con = _PER_THREAD.con = _DATABASE[0][1].cursor()
            _PER_THREAD.pid = os.getpid()
    return con


def add_identity(df, source_name: str | None, source_digest: str | None, split: SplitConfig, text: str = "text"):
    """Add ``doc_id``, ``content_hash`` and ``split`` columns to a polars frame with locator and text (the column
    ``text``: the content hash is of it; named fields hash their columns joined, see tasks/corpus/shard.py).

    One source (``source_name`` and ``source_digest`` given) or several (both None): then every row names its
    own in the frame's ``source`` and ``source_digest`` columns (a shard that packs several small files)."""
    import polars as pl

    if df.height == 0:
        return df.with_columns(pl.lit(None, pl.Utf8).alias(c) for c in ("doc_id", "content_hash", "split"))
    per_row = source_name is None
    if df.height <= SMALL_FRAME:  # the definitions themselves: cheaper than opening DuckDB (25-45 ms)
        names = df["source"].to_list() if per_row else [source_name] * df.height
        digests = df["source_digest"].to_list() if per_row else [source_digest] * df.height
        ids = [doc_id_for(n, d, loc) for n, d, loc in zip(names, digests, df["locator"].to_list())]
        return df.with_columns(
            pl.Series("doc_id", ids, pl.Utf8),
            pl.Series("content_hash", [content_hash_for(t) for t in df[text].to_list()], pl.Utf8),
            pl.Series("split", [split_for(i, split) for i in ids], pl.Utf8),
        )
    held_out = split.valid > 0 or split.test > 0  # else every document is train: no split draw to hash
    con = _connection()
    try:
        # Arrow string views: polars hands them over without copying the texts (its default export to
        # large_string copies every byte, which cost as much as the hashing itself)
        if per_row:
            docs = df.select((pl.col("source") + SEP + pl.col("source_digest") + SEP).alias("prefix"), "locator",
                             pl.col(text).alias("text"))
            key = "prefix || locator"
            params = {}
        else:
            docs, key = df.select("locator", pl.col(text).alias("text")), "$prefix || locator"
            params = {"prefix": f"{source_name}{SEP}{source_digest}{SEP}"}
        con.register("docs", docs.to_arrow(compat_level=pl.CompatLevel.newest()))
        # DuckDB keeps insertion order for plain projections (preserve_insertion_order is on by default).
        draw = "substr(md5($seed || ':' || doc_id), 1, 8)" if held_out else "NULL"
        ids = pl.from_arrow(con.sql(
            f"WITH a AS (SELECT substr(sha256({key}), 1, 20) AS doc_id, md5(text) AS content_hash"
            f" FROM docs) SELECT doc_id, content_hash, {draw} AS h FROM a",
            params={**params, **({"seed": str(split.seed)} if held_out else {})},
        ).to_arrow_table())
    finally:
        con.unregister("docs")
    if not held_out:
        return df.with_columns(ids["doc_id"], ids["content_hash"], pl.lit("train", pl.Utf8).alias("split"))
    u = ids["h"].str.to_integer(base=16).cast(pl.Float64) / 2.0**32
    split_col = (
        pl.when(u < split.valid).then(pl.lit("valid"))
        .when(u < split.valid + split.test).then(pl.lit("test"))
        .otherwise(pl.lit("train"))
    )
    return df.with_columns(ids["doc_id"], ids["content_hash"], pl.select(split_col.alias("split"))["split"])
