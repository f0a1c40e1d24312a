"""N-gram counting in DuckDB: Parquet documents -> a DuckDB file of integer-coded n-gram counts.

Pure storage: SQL over the corpus artifact's Parquet plus numpy over the count table, no smoothing math
(that lives in models/ngram.py).

Layout of the DuckDB file written by :func:`count_ngrams`:

- ``vocab(id INTEGER, word VARCHAR, count BIGINT)``: ids 0, 1, 2 are ``<unk>``, ``<s>``, ``</s>`` (KenLM's
  order); then words by descending count, ties by word. A literal ``<unk>`` in the text is an ordinary
  word that takes id 0 with its count; when absent, id 0 has count 0.
- ``ngrams_padded(w1 INTEGER, ..., wN INTEGER, count BIGINT)``: for every position of ``<s> w1 .. wk </s>``
  (one ``<s>`` per sentence: an n-gram never crosses a sentence boundary), the N tokens starting there,
  NULL past the ``</s>``; distinct windows with their counts. Every n-gram of order n <= N is the first
  n tokens of exactly one window per occurrence, so this one table holds the counts of all orders.
- ``ngrams_<n>(w1, ..., wn, count)`` for n = 1..N: views over ``ngrams_padded`` with the raw counts of
  order n (``GROUP BY`` the first n columns where ``wn`` is not NULL).
- ``meta(key VARCHAR, value VARCHAR)``: order, sentence mode, sentences, tokens.

Why one padded table: the corpus is scanned and grouped once (not once per order), and, read back
sorted, every order falls out of it in numpy: order n's rows are the runs of equal first n columns, in
lexicographic (trie) order, each with the row of its context (w1 .. wn-1) in order n-1 for free.

Tokens are maximal runs of non-whitespace, with Python's ``str.split()`` definition of whitespace, so
the Python-side scorer splits evaluation text identically. Sentences are lines (blank lines are
skipped) or whole documents. Windows are built by list slicing + ``unnest`` + ``GROUP BY`` (the fastest
route measured on this project's machines). ``memory_limit``, ``temp_directory`` and ``threads`` are passed to
DuckDB, so counting spills to disk for corpora bigger than RAM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2

# Python's str.split() whitespace, as an RE2 class (so SQL and Python tokenize alike).
_WS_NOT_SPACE = r"\t\n\x{0B}\f\r\x{1C}-\x{1F}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}"
TOKEN_PATTERN = f"[^ {_WS_NOT_SPACE}]+"
LINE_BREAKS = r"\r\n|[\n\r\x{0B}\f\x{1C}-\x{1E}\x{85}\x{2028}\x{2029}]"  # str.splitlines()
_OTHER_BREAKS = r"[\r\x{0B}\f\x{1C}-\x{1E}\x{85}\x{2028}\x{2029}]"


@dataclass(frozen=True)
class DuckSettings:
    memory_limit: str = "4GB"
    temp_directory: str | None = None
    threads: int = 0  # 0: DuckDB's default (all cores)


@dataclass
class NgramTables:
    """Raw counts of orders 1..N as numpy arrays, ready for the estimator.

    ``tables[n-1]`` = (ids int32 (m, n), counts int64 (m,)), rows in lexicographic order of the ids.
    ``contexts[n-1]`` (n >= 2): for each row, the row of its context w1 .. wn-1 in ``tables[n-2]``; order 2's
    context is its first word id (the estimator's unigram table holds every id); ``contexts[0]`` is empty.
    """

    words: list[str]
    tables: list[tuple[np.ndarray, np.ndarray]]
    contexts: list[np.ndarray]
    summary: dict[str, Any] = field(default_factory=dict)


def connect(path: str | Path, settings: DuckSettings = DuckSettings(), read_only: bool = False):
    import duckdb

    con = duckdb.connect(str(path), read_only=read_only)
    if not read_only:
        con.execute(f"SET memory_limit = '{settings.memory_limit}'")
        if settings.temp_directory:
            Path(settings.temp_directory).mkdir(parents=True, exist_ok=True)
            con.execute(f"SET temp_directory = '{_sql_str(settings.temp_directory)}'")
        if settings.threads:
            con.execute(f"SET threads = {int(settings.threads)}")
        con.execute("SET preserve_insertion_order = false")
    return con


def _sql_str(text: str) -> str:
    return str(text).replace("'", "''")


def count_ngrams(
    parquet_files: Sequence[str | Path],
    db_path: str | Path,
    order: int,
    sentence: str = "line",
    settings: DuckSettings = DuckSettings(),
) -> dict[str, Any]:
    """Count n-grams of orders 1..order over the ``text`` column; write them to ``db_path``.

    Returns {"sentences", "tokens" (words + one </s> per sentence), "vocab" (distinct words incl. the three
    specials), "distinct": {n: distinct n-grams}}.
    """
    return count_ngram_tables(parquet_files, db_path, order, sentence, settings).summary


def count_ngram_tables(
    parquet_files: Sequence[str | Path],
    db_path: str | Path,
    order: int,
    sentence: str = "line",
    settings: DuckSettings = DuckSettings(),
) -> NgramTables:
    """:func:`count_ngrams`, and the counts of every order handed back as arrays (no second read of the file)."""
    if order < 1:
        raise ValueError("order: must be >= 1")
    if sentence not in ("line", "document"):
        raise ValueError("sentence: use 'line' or 'document'")
    files = [str(f) for f in parquet_files if Path(f).exists()]
    con = connect(db_path, settings)
    try:
        _tokenize(con, files, sentence)
        _build_vocab(con)
        words = [w for (w,) in con.execute("SELECT word FROM vocab ORDER BY id").fetchall()]
        pad = len(words)  # the id of "past the </s>" while counting; NULL in the stored table
        con.execute(f"CREATE TABLE ngrams_padded AS {_padded_count_sql(order, pad)}")
        con.execute("DROP TABLE sents_ids")
        sentences, tokens = con.execute("SELECT count(*), coalesce(sum(len(toks) + 1), 0) FROM sents").fetchone()
        con.execute("DROP TABLE sents")
        return _finish_counts(con, words, order, sentence, int(sentences), int(tokens))
    finally:
        con.close()


def _finish_counts(con, words: list[str], order: int, sentence: str, sentences: int, tokens: int) -> NgramTables:
    """Shared tail of both counting routes, with ``ngrams_padded`` built: the per-order views, the meta table
    and a checkpoint in the counts file, and the counts of every order as arrays."""
    pad = len(words)
    for n in range(1, order + 1):
        con.execute(f"CREATE VIEW ngrams_{n} AS {_order_view_sql(n, order)}")
    padded, counts = _fetch_padded(con, order, pad)
    meta = {"order": order, "sentence": sentence, "sentences": sentences, "tokens": tokens}
    con.execute("CREATE TABLE meta(key VARCHAR, value VARCHAR)")
    con.executemany("INSERT INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in meta.items()])
    con.execute("CHECKPOINT")
    tables, contexts = orders_from_padded(padded, counts, pad)
    summary = {"sentences": sentences, "tokens": tokens, "vocab": len(words),
               "distinct": {n: len(t[1]) for n, t in enumerate(tables, start=1)}}
    return NgramTables(words, tables, contexts, summary)


# --- partitioned counting: map (count a slice into hash partitions), merge (per partition), read -------------
# The same counts as count_ngram_tables, computed by independent workers. A worker counts the padded windows of
# its slice of the documents as *words* (global ids need the whole vocabulary) and writes them split into P
# files by hash(w1) mod P: every window sharing a first word, hence every n-gram of any order (a window prefix)
# with all its occurrences, lands in one partition. Merging partition p is concatenating the workers' p files
# and summing the counts of identical windows. The read side derives the vocabulary from the merged windows
# (a word's count is the count of the windows it starts), codes the windows with it and hands the same sorted
# arrays to the estimator as the single-node counter: same model, same ARPA bytes.


def document_slices(parquet_file: str | Path, slices: int) -> list[tuple[int, int]]:
    """``slices`` contiguous row ranges [lo, hi) covering the documents of ``parquet_file`` (some may be empty)."""
    import pyarrow.parquet as pq

    rows = pq.ParquetFile(str(parquet_file)).metadata.num_rows if Path(parquet_file).exists() else 0
    bounds = [rows * i // slices for i in range(slices + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def _windows_sql(order: int) -> str:
    """The padded windows of ``sents`` as words (NULL past the </s>) with their counts."""
    n = order
    padding = "[" + ", ".join(["NULL::VARCHAR"] * (n - 1)) + "]" if n > 1 else "[]::VARCHAR[]"
    cols = ", ".join(f"g[{j}] AS w{j}" for j in range(1, n + 1))
    return f"""SELECT {cols}, count(*)::BIGINT AS count FROM (
                 SELECT unnest([p[i:i + {n - 1}] for i in range(1, len(p) - {n - 2})]) AS g
                 FROM (SELECT ['{BOS}'] || toks || ['{EOS}'] || {padding} AS p FROM sents))
               GROUP BY ALL"""


def count_slice_partitions(
    parquet_file: str | Path,
    rows: tuple[int, int],
    out_dir: str | Path,
    order: int,
    partitions: int,
    sentence: str = "line",
    settings: DuckSettings = DuckSettings(),
) -> dict[str, Any]:
    """Map side: count the windows of documents [lo, hi) of ``parquet_file``; write ``out_dir/part-<p>.parquet``
    (w1 .. wN VARCHAR, count BIGINT) for every p < ``partitions`` (empty files too). Returns {"sentences",
    "tokens", "files": [path per partition]}."""
    if order < 1 or partitions < 1:
        raise ValueError("order and partitions: must be >= 1")
    if sentence not in ("line", "document"):
        raise ValueError("sentence: use 'line' or 'document'")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lo, hi = int(rows[0]), int(rows[1])
    source = "(SELECT NULL::VARCHAR AS text WHERE false)"
    if Path(parquet_file).exists():
        source = (f"(SELECT text FROM read_parquet('{_sql_str(str(parquet_file))}', file_row_number = true) "
                  f"WHERE file_row_number >= {lo} AND file_row_number < {hi})")
    con = connect(":memory:", settings)
    try:
        _tokenize(con, [], sentence, source)
        con.execute("CREATE TEMP TABLE slice_words AS SELECT DISTINCT unnest(toks) AS word FROM sents")
        _check_reserved(con, "slice_words")
        con.execute(f"CREATE TEMP TABLE windows AS {_windows_sql(order)}")
        sentences, tokens = con.execute("SELECT count(*), coalesce(sum(len(toks) + 1), 0) FROM sents").fetchone()
        names = ", ".join(f"w{j}" for j in range(1, order + 1))
        files = []
        for p in range(partitions):
            path = out_dir / f"part-{p}.parquet"
            con.execute(f"COPY (SELECT {names}, count FROM windows WHERE hash(w1) % {partitions} = {p}) "
                        f"TO '{_sql_str(str(path))}' (FORMAT parquet)")
            files.append(str(path))
    finally:
        con.close()
    return {"sentences": int(sentences), "tokens": int(tokens), "files": files}


def merge_partition(files: Sequence[str | Path], out_path: str | Path, order: int,
                    settings: DuckSettings = DuckSettings()) -> int:
    """Reduce side: the workers' files of one partition, concatenated, identical windows' counts summed, to
    ``out_path``. Returns the number of distinct windows."""
    names = ", ".join(f"w{j}" for j in range(1, order + 1))
    listing = ", ".join(f"'{_sql_str(str(f))}'" for f in files)
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    con = connect(":memory:", settings)
    try:
        con.execute(f"COPY (SELECT {names}, sum(count)::BIGINT AS count FROM read_parquet([{listing}]) "
                    f"GROUP BY ALL) TO '{_sql_str(str(out_path))}' (FORMAT parquet)")
        (rows,) = con.execute(f"SELECT count(*) FROM read_parquet('{_sql_str(str(out_path))}')").fetchone()
    finally:
        con.close()
    return int(rows)


def tables_from_partitions(
    merged_files: Sequence[str | Path],
    db_path: str | Path,
    order: int,
    sentence: str,
    sentences: int,
    tokens: int,
    settings: DuckSettings = DuckSettings(),
) -> NgramTables:
    """Read side: the merged partitions -> the counts file of :func:`count_ngram_tables` (same tables) and the
    same arrays. ``sentences`` and ``tokens`` are the workers' sums."""
    listing = ", ".join(f"'{_sql_str(str(f))}'" for f in merged_files)
    con = connect(db_path, settings)
    try:
        con.execute(f"CREATE TEMP TABLE merged AS SELECT * FROM read_parquet([{listing}])")
        con.execute(f"CREATE TEMP TABLE word_counts AS SELECT w1 AS word, sum(count)::BIGINT AS count FROM merged "
                    f"WHERE w1 NOT IN ('{BOS}', '{EOS}') GROUP BY w1")
        _vocab_table(con, f"SELECT {int(sentences)}::BIGINT AS n")
        con.execute("DROP TABLE word_counts")
        words = [w for (w,) in con.execute("SELECT word FROM vocab ORDER BY id").fetchall()]
        pad = len(words)
        ids = ", ".join(f"v{j}.id AS w{j}" for j in range(1, order + 1))
        joins = " ".join(f"LEFT JOIN vocab v{j} ON v{j}.word = m.w{j}" for j in range(1, order + 1))
        con.execute(f"CREATE TABLE ngrams_padded AS SELECT {ids}, m.count FROM merged m {joins}")
        con.execute("DROP TABLE merged")
        return _finish_counts(con, words, order, sentence, int(sentences), int(tokens))
    finally:
        con.close()


def _tokenize(con, files: list[str], sentence: str, source: str | None = None) -> None:
    """TEMP TABLE sents(sid, toks VARCHAR[]): the non-empty sentences as token lists (of ``source``, a
    subquery with a ``text`` column, when given; else of the files' documents)."""
    if source is None and files:
        listing = ", ".join(f"'{_sql_str(f)}'" for f in files)
        source = f"(SELECT text FROM read_parquet([{listing}]))"
    elif source is None:
        source = "(SELECT NULL::VARCHAR AS text WHERE false)"
    # Fast paths (plain split on LF / on spaces) when a text holds no other break / whitespace
    # character; the regular expressions otherwise. Both give str.splitlines() / str.split().
    if sentence == "line":
        pieces = f"""SELECT unnest(CASE WHEN regexp_matches(text, '{_OTHER_BREAKS}')
                       THEN regexp_split_to_array(text, '{LINE_BREAKS}') ELSE string_split(text, chr(10)) END) AS s
                     FROM {source}"""
    else:
        pieces = f"SELECT text AS s FROM {source}"
    con.execute(f"""
        CREATE TEMP TABLE sents AS
        SELECT row_number() OVER () AS sid, toks FROM (
          SELECT CASE WHEN regexp_matches(s, '[{_WS_NOT_SPACE}]') THEN regexp_extract_all(s, '{TOKEN_PATTERN}')
                      ELSE list_filter(string_split(s, ' '), lambda x: x <> '') END AS toks
          FROM ({pieces})
        ) WHERE len(toks) > 0""")


def _build_vocab(con) -> None:
    """TABLE vocab (ids by frequency, see the module docstring) and TEMP TABLE sents_ids(ids INTEGER[])."""
    con.execute("CREATE TEMP TABLE word_counts AS SELECT w AS word, count(*) AS count "
                "FROM (SELECT unnest(toks) AS w FROM sents) GROUP BY w")
    _check_reserved(con, "word_counts")
    _vocab_table(con, "SELECT count(*) AS n FROM sents")
    # Sentences as id lists with the markers: <s> w1 .. wk </s>.
    con.execute(f"""
        CREATE TEMP TABLE sents_ids AS
        SELECT [{BOS_ID}] || list(v.id ORDER BY t.pos) || [{EOS_ID}] AS ids
        FROM (SELECT sid, unnest(toks) AS w, generate_subscripts(toks, 1) AS pos FROM sents) t
        JOIN vocab v ON v.word = t.w
        GROUP BY sid""")
    con.execute("DROP TABLE word_counts")


def _check_reserved(con, table: str) -> None:
    """The text may not hold the sentence markers (``table`` has a ``word`` column)."""
    bad = con.execute(f"SELECT word FROM {table} WHERE word IN ('{BOS}', '{EOS}') ORDER BY word DESC").fetchall()
    if bad:
        raise ValueError(f"the text contains the reserved token {bad[0][0]!r} (sentence markers are added here)")


def _vocab_table(con, sentences_sql: str) -> None:
    """TABLE vocab from TEMP TABLE word_counts(word, count) and the number of sentences (a query of ``n``)."""
    con.execute(f"""
        CREATE TABLE vocab AS
        WITH n AS ({sentences_sql}),
        specials AS (
          SELECT 0 AS id, '{UNK}' AS word, coalesce((SELECT count FROM word_counts WHERE word = '{UNK}'), 0) AS count
          UNION ALL SELECT 1, '{BOS}', (SELECT n FROM n)
          UNION ALL SELECT 2, '{EOS}', (SELECT n FROM n)),
        rest AS (
          SELECT (row_number() OVER (ORDER BY count DESC, word) + 2)::INTEGER AS id, word, count
          FROM word_counts WHERE word <> '{UNK}')
        SELECT id::INTEGER AS id, word, count::BIGINT AS count FROM specials
        UNION ALL SELECT * FROM rest ORDER BY id""")


def _padded_count_sql(order: int, pad: int) -> str:
    """SELECT w1..wN, count of the padded windows (see the module docstring) over ``sents_ids``.

    When N ids fit one integer (BIGINT up to 63 bits, HUGEINT up to 127) a window is packed into it for
    the GROUP BY (faster than N columns) and unpacked afterwards; otherwise the ids are grouped as columns.
    The pad id is the largest, so windows sort as their sentences' tails do: shorter before longer.
    """
    n = order
    bits = max(1, int(pad).bit_length())
    padding = "[" + ", ".join([str(pad)] * (n - 1)) + "]" if n > 1 else "[]::INTEGER[]"
    windows = "for i in range(1, len(p) - " + str(n - 2) + ")"
    source = f"FROM (SELECT ids || {padding} AS p FROM sents_ids)"
    if n * bits <= 127:
        kind = "BIGINT" if n * bits <= 63 else "HUGEINT"
        packed = " | ".join(f"(p[i + {j}]::{kind} << {bits * (n - 1 - j)})" for j in range(n))
        mask = (1 << bits) - 1
        unpack = ", ".join(f"nullif(((k >> {bits * (n - j)}) & {mask})::INTEGER, {pad}) AS w{j}"
                           for j in range(1, n + 1))
        return f"""SELECT {unpack}, count FROM (
                     SELECT k, count(*)::BIGINT AS count FROM (SELECT unnest([{packed} {windows}]) AS k {source})
                     GROUP BY k)"""
    cols = ", ".join(f"g[{j}] AS w{j}" for j in range(1, n + 1))
    unpad = ", ".join(f"nullif(w{j}, {pad}) AS w{j}" for j in range(1, n + 1))
    names = ", ".join(f"w{j}" for j in range(1, n + 1))
    return f"""SELECT {unpad}, count FROM (
                 SELECT {names}, count(*)::BIGINT AS count FROM (
                   SELECT {cols} FROM (SELECT unnest([p[i:i + {n - 1}] {windows}]) AS g {source}))
                 GROUP BY ALL)"""


def _order_view_sql(n: int, order: int) -> str:
    names = ", ".join(f"w{j}" for j in range(1, n + 1))
    if n == order:  # a full window is one n-gram: already distinct
        return f"SELECT {names}, count FROM ngrams_padded WHERE w{n} IS NOT NULL"
    return f"SELECT {names}, sum(count)::BIGINT AS count FROM ngrams_padded WHERE w{n} IS NOT NULL GROUP BY ALL"


def _fetch_padded(con, order: int, pad: int) -> tuple[list[np.ndarray], np.ndarray]:
    """The padded windows sorted lexicographically (NULL -> ``pad``, the largest id): ([w1, .., wN], counts)."""
    cols = ", ".join(f"coalesce(w{j}, {pad}) AS w{j}" for j in range(1, order + 1))
    by = ", ".join(str(j) for j in range(1, order + 1))
    arrays = con.execute(f"SELECT {cols}, count FROM ngrams_padded ORDER BY {by}").fetchnumpy()
    columns = [np.asarray(arrays[f"w{j}"], dtype=np.int32) for j in range(1, order + 1)]
    return columns, np.asarray(arrays["count"], dtype=np.int64)


def orders_from_padded(columns: Sequence[np.ndarray], counts: np.ndarray, pad: int) -> tuple[list, list]:
    """Per order n = 1..N: (ids, counts) and the context rows (see :class:`NgramTables`), from the sorted
    padded windows given as columns w1..wN. Order n's n-grams are the runs of equal first n columns whose
    n-th id is not ``pad``; a run's count is the sum over its windows."""
    m = len(counts)
    new_run = np.zeros(m, dtype=bool)  # row starts a run of equal first n columns (grows with n)
    new_run[:1] = True
    tables, contexts = [], []
    prev_rank = None  # per run of order n-1: its row in order n-1's table (-1: a run ending in pad)
    for n, col in enumerate(columns, start=1):
        prev_new_run = new_run.copy()
        new_run[1:] |= col[1:] != col[:-1]
        starts = np.flatnonzero(new_run)
        kept = col[starts] != pad
        run_counts = np.add.reduceat(counts, starts) if m else counts[:0]
        rows = starts[kept]
        ids = np.empty((len(rows), n), dtype=np.int32)
        for j in range(n):
            ids[:, j] = columns[j][rows]
        tables.append((ids, run_counts[kept]))
        if n == 1:
            contexts.append(np.zeros(0, dtype=np.int64))
        elif n == 2:
            contexts.append(ids[:, 0].astype(np.int64))
        else:  # runs only split going up an order: count the order-(n-1) runs begun so far
            parent_run = np.cumsum(prev_new_run[starts]) - 1
            contexts.append(prev_rank[parent_run[kept]])
        prev_rank = np.where(kept, np.cumsum(kept) - 1, -1)
    return tables, contexts


def read_counts(db_path: str | Path) -> tuple[list[str], list[tuple[Any, Any]]]:
    """(vocab words by id, [(ids int32 array (m, n), counts int64 array (m,)) for n = 1..order])."""
    counted = read_count_tables(db_path)
    return counted.words, counted.tables


def read_count_tables(db_path: str | Path) -> NgramTables:
    """The arrays of :func:`count_ngram_tables`, read back from a counts file."""
    con = connect(db_path, read_only=True)
    try:
        words = [w for (w,) in con.execute("SELECT word FROM vocab ORDER BY id").fetchall()]
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        order = int(meta["order"])
        padded, counts = _fetch_padded(con, order, len(words))
    finally:
        con.close()
    tables, contexts = orders_from_padded(padded, counts, len(words))
    summary = {"sentences": int(meta["sentences"]), "tokens": int(meta["tokens"]), "vocab": len(words),
               "distinct": {n: len(t[1]) for n, t in enumerate(tables, start=1)}}
    return NgramTables(words, tables, contexts, summary)


def read_meta(db_path: str | Path) -> dict[str, str]:
    con = connect(db_path, read_only=True)
    try:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())
    finally:
        con.close()
