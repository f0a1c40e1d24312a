"""Exact dedup against its plain-Python definition: the first row of each content hash (per ``within`` group
when given) is kept, every later one names the first one's doc_id."""

import random

import polars as pl
import pytest

from corpusforge.tasks.corpus.dedup import exact_duplicates


def _definition(rows, within):
    first_of: dict = {}
    keep, dups = [], []
    for r in rows:
        key = (r[within], r["content_hash"]) if within else r["content_hash"]
        if key in first_of:
            keep.append(False)
            dups.append({**({"source": r["source"]} if "source" in r else {}), "locator": r["locator"],
                         "duplicate_of": first_of[key]})
        else:
            keep.append(True)
            first_of[key] = r["doc_id"]
    return keep, dups


@pytest.mark.parametrize(("within", "with_source"), [(None, False), (None, True), ("source", True)])
def test_exact_duplicates_equal_the_definition(within, with_source):
    rng = random.Random(7)
    for trial in range(20):
        n = rng.randrange(0, 400)
        rows = [{"doc_id": f"d{i}", "locator": f"L{i}", "content_hash": f"h{rng.randrange(max(1, n // 3))}",
                 "text": "x" * rng.randrange(5), **({"source": f"s{rng.randrange(3)}"} if with_source else {})}
                for i in range(n)]
        schema = {"doc_id": pl.Utf8, "locator": pl.Utf8, "content_hash": pl.Utf8, "text": pl.Utf8,
                  **({"source": pl.Utf8} if with_source else {})}
        df = pl.DataFrame(rows, schema=schema)
        keep, dups = exact_duplicates(df, within=within)
        want_keep, want_dups = _definition(rows, within)
        assert keep.to_list() == want_keep, trial
        got = dups.select(*(["source"] if with_source else []), "locator", "duplicate_of").to_dicts()
        assert got == want_dups, trial
