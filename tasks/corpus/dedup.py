"""Exact deduplication, shared by the shard step (within a file) and the corpus merge (across files): the
first occurrence of each content hash is kept, every later one is dropped naming it (``duplicate_of``)."""

from __future__ import annotations


def exact_duplicates(df):
    """(keep: a boolean Series, True at the first occurrence of each ``content_hash``; the other rows, in order,
    with ``duplicate_of`` = the ``doc_id`` of that first occurrence)."""
    import polars as pl

    first = df["content_hash"].is_first_distinct()
    originals = df.filter(first).select("content_hash", pl.col("doc_id").alias("duplicate_of"))
    dups = df.filter(~first).join(originals, on="content_hash", how="left", maintain_order="left")
    return first, dups
