"""corpusforge.storage.ngram_counts: DuckDB counting equals the pure-Python reference counter (corpusforge.models.ngram)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpusforge.models.ngram import count_sentences
from corpusforge.storage.ngram_counts import (
    DuckSettings,
    count_ngram_tables,
    count_ngrams,
    orders_from_padded,
    read_count_tables,
    read_counts,
    read_meta,
)


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
    from corpusforge.storage.ngram_counts import connect

    con = connect(tmp_path / "x.duckdb", DuckSettings(memory_limit="300MB", temp_directory=str(tmp_path / "spill"),
                                                      threads=1))
    try:
        got = dict(con.execute("SELECT name, value FROM duckdb_settings() WHERE name IN "
                               "('memory_limit', 'temp_directory', 'threads')").fetchall())
    finally:
        con.close()
    assert got["threads"] == "1" and got["temp_directory"] == str(tmp_path / "spill")
    assert got["memory_limit"] == "286.1 MiB"  # 300e6 bytes / 2**20


def padded_windows(rows: list[list[int]], n: int, pad: int) -> dict[tuple, int]:
    """The padded windows of id sentences, counted one by one: what ngrams_padded must hold."""
    expected: dict[tuple, int] = {}
    for r in rows:
        p = r + [pad] * (n - 1)
        for i in range(len(r)):
            expected[tuple(p[i:i + n])] = expected.get(tuple(p[i:i + n]), 0) + 1
    return expected


@pytest.mark.parametrize("n", [1, 3, 5])
def test_packed_and_column_grouping_agree(n):
    """Packing a window into one BIGINT/HUGEINT and grouping by n id columns give the same table."""
    import duckdb

    from corpusforge.storage.ngram_counts import _padded_count_sql

    con = duckdb.connect()
    rng = np.random.default_rng(n)
    rows = [[1] + rng.integers(3, 40, size=rng.integers(1, 12)).tolist() + [2] for _ in range(200)]
    con.execute("CREATE TABLE sents_ids AS SELECT unnest(?::INTEGER[][]) AS ids", [rows])
    # the pad id sets the bits per id: 6 (BIGINT for every n here), 21 (HUGEINT at n = 5) and 31 bits
    # (HUGEINT at n = 3, the column path at n = 5)
    stored = []
    for pad in (63, 2**20, 2**30):
        got = sorted(con.execute(_padded_count_sql(n, pad)).fetchall(), key=str)  # NULL past the </s>
        expected = [(*(None if w == pad else w for w in g), c) for g, c in padded_windows(rows, n, pad).items()]
        assert got == sorted(expected, key=str)
        stored.append(got)
    assert stored[0] == stored[1] == stored[2]


def test_orders_from_padded_by_hand():
    """Sentences <s> a b </s> and <s> a </s> (ids 1 3 4 2 and 1 3 2), order 3, pad 9."""
    windows = sorted(padded_windows([[1, 3, 4, 2], [1, 3, 2]], 3, 9).items())
    columns = [np.array([g[j] for g, _ in windows], dtype=np.int32) for j in range(3)]
    counts = np.array([c for _, c in windows], dtype=np.int64)
    tables, contexts = orders_from_padded(columns, counts, pad=9)
    as_lists = [(ids.tolist(), c.tolist()) for ids, c in tables]
    assert as_lists[0] == ([[1], [2], [3], [4]], [2, 2, 2, 1])
    assert as_lists[1] == ([[1, 3], [3, 2], [3, 4], [4, 2]], [2, 1, 1, 1])
    assert as_lists[2] == ([[1, 3, 2], [1, 3, 4], [3, 4, 2]], [1, 1, 1])
    assert contexts[1].tolist() == [1, 3, 3, 4]  # order 2: the first word id
    assert contexts[2].tolist() == [0, 0, 2]  # rows of "<s> a", "<s> a", "a b" in the bigram table


@pytest.mark.parametrize("order", [1, 2, 4])
def test_arrays_views_and_read_back_agree(tmp_path, order):
    """count_ngram_tables's arrays = the reference counter = the ngrams_<n> views = read_count_tables."""
    import duckdb

    src = write_docs(tmp_path / "train.parquet", DOCS + ["the cat sat on the mat again"])
    counted = count_ngram_tables([src], tmp_path / "c.duckdb", order)
    sents = [p.split() for d in DOCS + ["the cat sat on the mat again"] for p in d.splitlines() if p.split()]
    ref_words, ref_tables = count_sentences(sents, order)
    assert counted.words == ref_words
    for (ids, c), (ref_ids, ref_c) in zip(counted.tables, ref_tables):  # same rows, same (sorted) order
        assert ids.tolist() == ref_ids.tolist() and c.tolist() == ref_c.tolist()
    for n in range(2, order + 1):  # each context row holds the n-gram's first n - 1 ids
        lower = counted.tables[n - 2][0] if n > 2 else np.arange(len(ref_words))[:, None]
        assert (lower[counted.contexts[n - 1]] == counted.tables[n - 1][0][:, :-1]).all()
    con = duckdb.connect(str(tmp_path / "c.duckdb"), read_only=True)
    try:
        for n, (ids, c) in enumerate(counted.tables, start=1):
            names = ", ".join(f"w{j}" for j in range(1, n + 1))
            view = con.execute(f"SELECT * FROM ngrams_{n} ORDER BY {names}").fetchall()
            assert view == [(*row, cnt) for row, cnt in zip(ids.tolist(), c.tolist())]
    finally:
        con.close()
    back = read_count_tables(tmp_path / "c.duckdb")
    assert back.summary == counted.summary
    assert all((a[0] == b[0]).all() and (a[1] == b[1]).all() for a, b in zip(back.tables, counted.tables))
    assert all((a == b).all() for a, b in zip(back.contexts, counted.contexts))


def test_empty_corpus_counts_nothing(tmp_path):
    src = write_docs(tmp_path / "train.parquet", ["", "  \n\t"])
    counted = count_ngram_tables([src], tmp_path / "c.duckdb", 3)
    assert counted.summary["sentences"] == 0 and counted.summary["distinct"] == {1: 0, 2: 0, 3: 0}
    assert counted.words == ["<unk>", "<s>", "</s>"]
