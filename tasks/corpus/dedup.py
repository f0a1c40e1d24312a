"""Exact deduplication, shared by the shard step (within a file) and the corpus merge (across files): the
first occurrence of each content hash is kept, every later one is dropped naming it (``duplicate_of``)."""

from __future__ import annotations


def exact_duplicates(df, within: str | None = None):
    """(keep: a boolean Series, True at the first occurrence of each ``content_hash``; the other rows, in order,
    with ``duplicate_of`` = the ``doc_id`` of that first occurrence). With ``within`` (a column, e.g. ``source``)
    only rows with the same value there are compared: a shard that packs several files dedups each file alone,
    as a shard of one file does, and leaves duplicates across files to the merge."""
    import polars as pl

    keys = ["content_hash"] if within is None else [within, "content_hash"]
    # per group with over(): ~3x less memory and half the time of is_first_distinct on a struct of the keys
    first = df["content_hash"].is_first_distinct() if within is None else df.select(
        pl.col("content_hash").is_first_distinct().over(within))[:, 0]
    originals = df.filter(first).select(*keys, pl.col("doc_id").alias("duplicate_of"))
    dups = df.filter(~first).join(originals, on=keys, how="left", maintain_order="left")
    return first, dups
