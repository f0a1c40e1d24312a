"""Step ``sparse_vectors`` (kind tfidf): one-hot, bag-of-words and TF-IDF document matrices.

Counting happens in DuckDB: tokenize (``words``: runs of letters, digits and underscores, Unicode-aware;
``whitespace``: split on whitespace), ``GROUP BY`` (document, term) for counts, then document
frequencies per term. The vocabulary and the IDF come from the train split (min_df / max_df /
max_features); valid and test documents are encoded with that vocabulary and IDF, their unknown
terms dropped. Term ids are in alphabetical order of the terms.

Files (CSR matrices written with ``scipy.sparse.save_npz``: plain numpy arrays, loadable with
``scipy.sparse.load_npz`` without pickle; rows follow ``<split>_docs.parquet``):
- ``vocab.parquet``: term_id, term, df (train documents containing it), cf (train occurrences), idf;
- ``<split>_bow.npz``: counts (BoW = the sum of the one-hot vectors of the document's tokens);
- ``<split>_onehot.npz``: binary presence (the one-hot vectors OR-ed: 1 if the term occurs);
- ``<split>_tfidf.npz``: TF(t, d) * IDF(t) with the configured variants and row normalization;
- ``<split>_docs.parquet``: row, doc_id, n_tokens (tokens before the vocabulary cut: the TF denominator).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corpusforge.storage.store import ArtifactStore
from corpusforge.tasks.embeddings.config import EmbeddingsConfig
from corpusforge.tasks.embeddings.glove import WHITESPACE_RE, WORDS_RE
from corpusforge.tasks.step import StepResult, artifact_input, run_step

SPARSE_STEP = "sparse_vectors"
SPARSE_VERSION = 1


def _tokens_sql(tokens: str, lowercase: bool) -> str:
    text = "lower(text)" if lowercase else "text"
    if tokens == "words":
        return f"regexp_extract_all({text}, '{WORDS_RE}')"
    return f"string_split_regex({text}, '{WHITESPACE_RE}')"


def count_terms(con, parquet: Path, tokens: str, lowercase: bool, table: str) -> None:
    """Create ``<table>_docs`` (row, doc_id, n_tokens) and ``<table>_counts`` (row, term, n) in DuckDB."""
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE {table}_tok AS
            SELECT file_row_number AS row, doc_id,
                   list_filter({_tokens_sql(tokens, lowercase)}, lambda t: t <> '') AS toks
            FROM read_parquet(?, file_row_number = true)""",
        [str(parquet)],
    )
    con.execute(f"""CREATE OR REPLACE TEMP TABLE {table}_docs AS
                    SELECT row, doc_id, len(toks)::BIGINT AS n_tokens FROM {table}_tok ORDER BY row""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE {table}_counts AS
                    SELECT row, term, count(*)::BIGINT AS n
                    FROM (SELECT row, unnest(toks) AS term FROM {table}_tok) GROUP BY row, term""")


def build_sparse_vectors(corpus: StepResult, cfg: EmbeddingsConfig, store: ArtifactStore) -> StepResult:
    return run_step(
        store, step=SPARSE_STEP, version=SPARSE_VERSION, name=cfg.name,
        config=cfg.step_config("tfidf"),
        inputs=[artifact_input(corpus)], build=lambda out: _build(out, Path(corpus.path), cfg),
        libraries=("duckdb", "scipy", "numpy", "polars"),
    )


def sparse_from_corpus_dir(corpus_dir: Path, out: Path, cfg: EmbeddingsConfig) -> dict[str, Any]:
    """Build every file of the artifact into ``out`` from a corpus directory (train/valid/test.parquet)."""
    return _build(out, corpus_dir, cfg)


def _build(out: Path, corpus_dir: Path, cfg: EmbeddingsConfig) -> dict[str, Any]:
    import duckdb
    import polars as pl
    from scipy import sparse

    from corpusforge.models.sparse_vectors import csr_from_triplets, idf_weights, select_vocabulary, tfidf

    con = duckdb.connect()
    try:
        count_terms(con, corpus_dir / "train.parquet", cfg.tokens, cfg.lowercase, "train")
        n_docs = con.execute("SELECT count(*) FROM train_docs").fetchone()[0]
        if n_docs == 0:
            raise ValueError("the corpus' train split has no documents")
        stats = pl.DataFrame(con.execute("""SELECT term, count(*)::BIGINT AS df, sum(n)::BIGINT AS cf
                               FROM train_counts GROUP BY term ORDER BY term""").fetchnumpy())
        keep = select_vocabulary(stats["df"].to_numpy(), n_docs, cfg.min_df, cfg.max_df, cfg.max_features)
        vocab = stats[keep].with_row_index("term_id").with_columns(pl.col("term_id").cast(pl.Int64))
        if vocab.height == 0:
            raise ValueError(f"min_df/max_df: no term is kept (min_df={cfg.min_df}, max_df={cfg.max_df})")
        idf = idf_weights(vocab["df"].to_numpy(), n_docs, cfg.idf, cfg.log_base)
        vocab = vocab.with_columns(pl.Series("idf", idf))
        vocab.write_parquet(out / "vocab.parquet")
        con.register("vocab_terms", vocab.select("term_id", "term").to_arrow())
        metrics: dict[str, Any] = {"vocab_size": vocab.height, "terms_seen": stats.height, "docs_train": n_docs}
        for split in ("train", "valid", "test"):
            path = corpus_dir / f"{split}.parquet"
            if split != "train":
                if not path.is_file():
                    continue
                count_terms(con, path, cfg.tokens, cfg.lowercase, split)
            docs = pl.DataFrame(con.execute(f"SELECT row, doc_id, n_tokens FROM {split}_docs ORDER BY row").fetchnumpy())
            if docs.height == 0:
                continue
            trip = con.execute(f"""SELECT c.row, v.term_id, c.n FROM {split}_counts c
                                   JOIN vocab_terms v USING (term) ORDER BY c.row, v.term_id""").fetchnumpy()
            shape = (docs.height, vocab.height)
            bow = csr_from_triplets(trip["row"], trip["term_id"], trip["n"], shape)
            onehot = bow.copy()
            onehot.data[:] = 1.0
            weighted = tfidf(bow, docs["n_tokens"].to_numpy(), idf, cfg.tf, cfg.norm)
            for label, matrix in (("bow", bow), ("onehot", onehot), ("tfidf", weighted)):
                sparse.save_npz(out / f"{split}_{label}.npz", sparse.csr_matrix(matrix), compressed=True)
            docs.write_parquet(out / f"{split}_docs.parquet")
            metrics[f"docs_{split}"] = docs.height
            metrics[f"nonzero_{split}"] = int(bow.nnz)
            metrics[f"density_{split}"] = float(bow.nnz) / float(max(1, shape[0] * shape[1]))
            metrics[f"tokens_{split}"] = int(docs["n_tokens"].sum())
    finally:
        con.close()
    info = {"kind": "tfidf", "tf": cfg.tf, "idf": cfg.idf, "log_base": cfg.log_base, "norm": cfg.norm,
            "tokens": cfg.tokens, "lowercase": cfg.lowercase, "vocab_size": int(vocab.height),
            "matrices": "<split>_{bow,onehot,tfidf}.npz (scipy CSR, rows = <split>_docs.parquet, cols = term_id)"}
    (out / "sparse.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return {"metrics": metrics, "sparse": info}
