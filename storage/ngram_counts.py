"""N-gram counting in DuckDB: Parquet documents -> a DuckDB file of integer-coded n-gram counts.

Pure storage: SQL over the corpus artifact's Parquet, no smoothing math (that lives in models/ngram.py).

Layout of the DuckDB file written by :func:`count_ngrams`:

- ``vocab(id INTEGER, word VARCHAR, count BIGINT)``: ids 0, 1, 2 are ``<unk>``, ``<s>``, ``</s>`` (KenLM's
  order); then words by descending count, ties by word. A literal ``<unk>`` in the text is an ordinary
  word that takes id 0 with its count; when absent, id 0 has count 0.
- ``ngrams_<n>(w1 INTEGER, ..., wn INTEGER, count BIGINT)`` for n = 1..order: raw counts of every n-gram
  of ``<s> w1 .. wk </s>`` (one ``<s>`` per sentence: an n-gram never crosses a sentence boundary).
- ``meta(key VARCHAR, value VARCHAR)``: order, sentence mode, sentences, tokens.

Tokens are maximal runs of non-whitespace, with Python's ``str.split()`` definition of whitespace, so
the Python-side scorer splits evaluation text identically. Sentences are lines (blank lines are
skipped) or whole documents. N-grams are built by list slicing + ``unnest`` + ``GROUP BY`` (the fastest
route measured in ../shared/STACK.md). ``memory_limit``, ``temp_directory`` and ``threads`` are passed to
DuckDB, so counting spills to disk for corpora bigger than RAM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    if order < 1:
        raise ValueError("order: must be >= 1")
    if sentence not in ("line", "document"):
        raise ValueError("sentence: use 'line' or 'document'")
    files = [str(f) for f in parquet_files if Path(f).exists()]
    con = connect(db_path, settings)
    try:
        if files:
            listing = ", ".join(f"'{_sql_str(f)}'" for f in files)
            source = f"(SELECT text FROM read_parquet([{listing}]))"
        else:
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
        bad = con.execute(f"""
            SELECT w FROM (SELECT unnest(toks) AS w FROM sents) WHERE w IN ('{BOS}', '{EOS}') LIMIT 1""").fetchall()
        if bad:
            raise ValueError(f"the text contains the reserved token {bad[0][0]!r} (sentence markers are added here)")
        con.execute(f"""
            CREATE TABLE vocab AS
            WITH c AS (SELECT w AS word, count(*) AS count FROM (SELECT unnest(toks) AS w FROM sents) GROUP BY w),
            n AS (SELECT count(*) AS n FROM sents),
            specials AS (
              SELECT 0 AS id, '{UNK}' AS word, coalesce((SELECT count FROM c WHERE word = '{UNK}'), 0) AS count
              UNION ALL SELECT 1, '{BOS}', (SELECT n FROM n)
              UNION ALL SELECT 2, '{EOS}', (SELECT n FROM n)),
            rest AS (
              SELECT (row_number() OVER (ORDER BY count DESC, word) + 2)::INTEGER AS id, word, count
              FROM c WHERE word <> '{UNK}')
            SELECT id::INTEGER AS id, word, count::BIGINT AS count FROM specials
            UNION ALL SELECT * FROM rest ORDER BY id""")
        # Sentences as id lists with the markers: <s> w1 .. wk </s>.
        con.execute(f"""
            CREATE TEMP TABLE seq AS
            SELECT sid, [{BOS_ID}] || list(v.id ORDER BY t.pos) || [{EOS_ID}] AS ids
            FROM (SELECT sid, unnest(toks) AS w, generate_subscripts(toks, 1) AS pos FROM sents) t
            JOIN vocab v ON v.word = t.w
            GROUP BY sid""")
        con.execute("DROP TABLE sents")
        n_words = con.execute("SELECT count(*) FROM vocab").fetchone()[0]
        bits = max(1, int(n_words - 1).bit_length())
        distinct = {}
        for n in range(1, order + 1):
            con.execute(f"CREATE TABLE ngrams_{n} AS {_ngram_count_sql(n, bits)}")
            distinct[n] = con.execute(f"SELECT count(*) FROM ngrams_{n}").fetchone()[0]
        sentences, tokens = con.execute("SELECT count(*), coalesce(sum(len(ids) - 1), 0) FROM seq").fetchone()
        vocab = con.execute("SELECT count(*) FROM vocab").fetchone()[0]
        con.execute("DROP TABLE seq")
        meta = {"order": order, "sentence": sentence, "sentences": int(sentences), "tokens": int(tokens)}
        con.execute("CREATE TABLE meta(key VARCHAR, value VARCHAR)")
        con.executemany("INSERT INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in meta.items()])
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return {"sentences": int(sentences), "tokens": int(tokens), "vocab": int(vocab), "distinct": distinct}


def _ngram_count_sql(n: int, bits: int) -> str:
    """SELECT w1..wn, count for order n over ``seq``. When n ids fit one integer (BIGINT up to 63 bits,
    HUGEINT up to 127) the n-gram is packed into it for the GROUP BY (faster than n columns) and
    unpacked afterwards; otherwise the ids are grouped as columns."""
    names = ", ".join(f"w{j}" for j in range(1, n + 1))
    source = f"FROM seq WHERE len(ids) >= {n}"
    windows = f"for i in range(1, len(ids) - {n - 2})"
    if n * bits <= 127:
        kind = "BIGINT" if n * bits <= 63 else "HUGEINT"
        packed = " | ".join(f"(ids[i + {j}]::{kind} << {bits * (n - 1 - j)})" for j in range(n))
        mask = (1 << bits) - 1
        unpack = ", ".join(f"((k >> {bits * (n - j)}) & {mask})::INTEGER AS w{j}" for j in range(1, n + 1))
        return f"""SELECT {unpack}, count FROM (
                     SELECT k, count(*)::BIGINT AS count FROM (SELECT unnest([{packed} {windows}]) AS k {source})
                     GROUP BY k)"""
    cols = ", ".join(f"g[{j}] AS w{j}" for j in range(1, n + 1))
    return f"""SELECT {names}, count(*)::BIGINT AS count FROM (
                 SELECT {cols} FROM (SELECT unnest([ids[i:i + {n - 1}] {windows}]) AS g {source}))
               GROUP BY ALL"""


def read_counts(db_path: str | Path) -> tuple[list[str], list[tuple[Any, Any]]]:
    """(vocab words by id, [(ids int32 array (m, n), counts int64 array (m,)) for n = 1..order])."""
    import numpy as np

    con = connect(db_path, read_only=True)
    try:
        words = [w for (w,) in con.execute("SELECT word FROM vocab ORDER BY id").fetchall()]
        order = int(con.execute("SELECT value FROM meta WHERE key = 'order'").fetchone()[0])
        tables = []
        for n in range(1, order + 1):
            names = ", ".join(f"w{j}" for j in range(1, n + 1))
            # lexicographic order = the estimator's trie order: it then needs no sort of its own
            arrays = con.execute(f"SELECT * FROM ngrams_{n} ORDER BY {names}").fetchnumpy()
            ids = np.stack([np.asarray(arrays[f"w{j}"], dtype=np.int32) for j in range(1, n + 1)], axis=1)
            tables.append((ids, np.asarray(arrays["count"], dtype=np.int64)))
    finally:
        con.close()
    return words, tables


def read_meta(db_path: str | Path) -> dict[str, str]:
    con = connect(db_path, read_only=True)
    try:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())
    finally:
        con.close()
