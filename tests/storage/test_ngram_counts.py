"""storage.ngram_counts: DuckDB counting equals the pure-Python reference counter (models.ngram)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from models.ngram import count_sentences
from storage.ngram_counts import DuckSettings, count_ngrams, read_counts, read_meta


def write_docs(path: Path, texts: list[str]) -> Path:
    pq.write_table(pa.table({"text": texts}), path)
    return path


def as_dict(words, tables):
    return [{tuple(words[i] for i in row): int(c) for row, c in zip(ids.tolist(), counts.tolist())}
            for ids, counts in tables]


DOCS = [
    "the cat sat on the mat\nthe cat ate the fish",
    "  the dog\tsat on  the mat  \n\n",  # odd spacing, a blank line (skipped)
    "<unk> is a word here\u00a0too",  # NBSP is whitespace for str.split()
    "x",
]


@pytest.mark.parametrize("sentence", ["line", "document"])
def test_duckdb_counts_equal_python_reference(tmp_path, sentence):
    src = write_docs(tmp_path / "train.parquet", DOCS)
    order = 4
    summary = count_ngrams([src], tmp_path / "c.duckdb", order, sentence, DuckSettings(memory_limit="256MB",
                           temp_directory=str(tmp_path / "spill"), threads=1))
    sents = [p.split() for d in DOCS for p in (d.splitlines() if sentence == "line" else [d]) if p.split()]
    ref_words, ref_tables = count_sentences(sents, order)
    words, tables = read_counts(tmp_path / "c.duckdb")
    assert words[:3] == ["<unk>", "<s>", "</s>"]
    assert as_dict(words, tables) == as_dict(ref_words, ref_tables)
    assert summary["sentences"] == len(sents)
    assert summary["tokens"] == sum(len(s) + 1 for s in sents)
    assert summary["distinct"] == {n: len(t[1]) for n, t in enumerate(ref_tables, start=1)}
    assert read_meta(tmp_path / "c.duckdb")["order"] == str(order)
    # the literal <unk> is an ordinary word with its count, and it is id 0
    assert int(tables[0][1][tables[0][0][:, 0] == 0][0]) == 1


def test_ids_by_frequency_and_unk_absent(tmp_path):
    src = write_docs(tmp_path / "train.parquet", ["b a b", "c b"])
    count_ngrams([src], tmp_path / "c.duckdb", 2)
    words, tables = read_counts(tmp_path / "c.duckdb")
    assert words == ["<unk>", "<s>", "</s>", "b", "a", "c"]  # b: 3, then a and c (1 each) by spelling
    uni = dict(zip(tables[0][0][:, 0].tolist(), tables[0][1].tolist()))
    assert 0 not in uni  # <unk> never seen: not a counted unigram (the model adds it with count 0)
    assert uni[1] == 2 and uni[2] == 2 and uni[3] == 3


def test_reserved_marker_in_text_is_an_error(tmp_path):
    src = write_docs(tmp_path / "train.parquet", ["a </s> b"])
    with pytest.raises(ValueError, match="reserved"):
        count_ngrams([src], tmp_path / "c.duckdb", 2)


def test_order_six(tmp_path):
    src = write_docs(tmp_path / "train.parquet", ["a b c d e f g", "a b c d e f"])
    summary = count_ngrams([src], tmp_path / "c.duckdb", 6)
    # 6-grams of "<s> a b c d e f g </s>" (9 tokens): 4; of "<s> a b c d e f </s>" (8 tokens): 3; 2 shared
    assert summary["distinct"][6] == 5
    words, tables = read_counts(tmp_path / "c.duckdb")
    assert np.asarray(tables[5][1]).sum() == 7


@pytest.mark.parametrize("text", [
    "a\r\nb c\rd\x0be\x0cf\x1cg\x85h\u2028i\u2029j\nk",  # every str.splitlines() break
    "a\tb\x0bc\x0cd\x1fe\xa0f\u1680g\u2000h\u200ai\u202fj\u205fk\u3000l  m",  # str.split() whitespace
    "plain words only here",
])
def test_tokenization_equals_python_split(tmp_path, text):
    src = write_docs(tmp_path / "train.parquet", [text, "x y"])
    count_ngrams([src], tmp_path / "c.duckdb", 1, "line")
    words, tables = read_counts(tmp_path / "c.duckdb")
    expected = {}
    for line in (text.splitlines() + ["x y"]):
        for w in line.split():
            expected[w] = expected.get(w, 0) + 1
    got = {words[i]: int(c) for (i,), c in zip(tables[0][0].tolist(), tables[0][1].tolist()) if i > 2}
    assert got == expected


def test_resource_settings_reach_duckdb(tmp_path):
    from storage.ngram_counts import connect

    con = connect(tmp_path / "x.duckdb", DuckSettings(memory_limit="300MB", temp_directory=str(tmp_path / "spill"),
                                                      threads=1))
    try:
        got = dict(con.execute("SELECT name, value FROM duckdb_settings() WHERE name IN "
                               "('memory_limit', 'temp_directory', 'threads')").fetchall())
    finally:
        con.close()
    assert got["threads"] == "1" and got["temp_directory"] == str(tmp_path / "spill")
    assert got["memory_limit"] == "286.1 MiB"  # 300e6 bytes / 2**20


@pytest.mark.parametrize("n", [1, 3, 5])
def test_packed_and_column_grouping_agree(n):
    """Packing ids into one BIGINT/HUGEINT and grouping by n id columns give the same table."""
    import duckdb

    from storage.ngram_counts import _ngram_count_sql

    con = duckdb.connect()
    rng = np.random.default_rng(n)
    rows = [[1] + rng.integers(3, 40, size=rng.integers(1, 12)).tolist() + [2] for _ in range(200)]
    con.execute("CREATE TABLE seq AS SELECT unnest(?::INTEGER[][]) AS ids", [rows])
    packed = sorted(con.execute(_ngram_count_sql(n, bits=6)).fetchall())  # 6 bits: BIGINT/HUGEINT paths
    columns = sorted(con.execute(_ngram_count_sql(n, bits=30)).fetchall())  # n*30 > 127 for n = 5
    wide = sorted(con.execute(_ngram_count_sql(n, bits=200)).fetchall())  # always the column path
    assert packed == columns == wide
    expected = {}
    for r in rows:
        for i in range(len(r) - n + 1):
            expected[tuple(r[i:i + n])] = expected.get(tuple(r[i:i + n]), 0) + 1
    assert packed == sorted((*k, v) for k, v in expected.items())
