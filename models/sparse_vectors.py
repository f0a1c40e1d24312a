"""Sparse text representations: one-hot, bag of words and TF-IDF, as scipy CSR matrices.

Pure math on counts that are computed elsewhere (tasks count them in DuckDB). Rows are documents,
columns are vocabulary ids.

TF variants (``tf``):
- ``relative``: count(t, d) / number of tokens in d (the teaching texts' definition);
- ``raw``: count(t, d);
- ``log``: 1 + log(count(t, d)) for count > 0 (sublinear TF);
- ``binary``: 1 if t occurs in d.

IDF variants (``idf``), with N documents and df(t) documents containing t:
- ``log``: log(N / df(t)) (the teaching texts' definition; a term in every document gets 0);
- ``smooth``: log((1 + N) / (1 + df(t))) + 1 (scikit-learn's default: never 0, no division by 0);
- ``none``: 1 (plain TF).

``log_base`` applies to the IDF logarithm: ``e`` (default), ``2`` or ``10``. The teaching text's
"I love coffee / I love tea" table prints 0.1, which is (1/3) * log10(2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

TfKind = Literal["relative", "raw", "log", "binary"]
IdfKind = Literal["log", "smooth", "none"]
LogBase = Literal["e", "2", "10"]
Norm = Literal["none", "l1", "l2"]

TF_KINDS: tuple[str, ...] = ("relative", "raw", "log", "binary")
IDF_KINDS: tuple[str, ...] = ("log", "smooth", "none")


def _log(x: np.ndarray, base: LogBase) -> np.ndarray:
    out = np.log(x)
    return out if base == "e" else out / math.log(float(base))


def csr_from_triplets(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, shape: tuple[int, int]):
    """A canonical CSR matrix (sorted indices, duplicates summed) from (row, col, value) triplets."""
    from scipy import sparse

    m = sparse.coo_matrix((np.asarray(values, dtype=np.float64), (np.asarray(rows), np.asarray(cols))), shape=shape)
    out = m.tocsr()
    out.sum_duplicates()
    out.sort_indices()
    return out


def select_vocabulary(df: np.ndarray, n_docs: int, min_df: int = 1, max_df: float = 1.0, max_features: int = 0) -> np.ndarray:
    """Indices of the terms to keep: min_df <= df <= max_df * n_docs, then the max_features most frequent.

    Ties at the max_features cut are broken by the order of ``df`` (callers pass terms sorted by
    term), so the selection is deterministic.
    """
    df = np.asarray(df)
    keep = (df >= min_df) & (df <= max_df * n_docs + 1e-9)
    idx = np.flatnonzero(keep)
    if max_features and idx.size > max_features:
        order = np.argsort(-df[idx], kind="stable")[:max_features]
        idx = np.sort(idx[order])
    return idx


def idf_weights(df: np.ndarray, n_docs: int, kind: IdfKind = "log", log_base: LogBase = "e") -> np.ndarray:
    """IDF per term from document frequencies (float64)."""
    df = np.asarray(df, dtype=np.float64)
    if kind == "none":
        return np.ones_like(df)
    if kind == "log":
        if np.any(df <= 0):
            raise ValueError("idf 'log' needs df >= 1 for every term (use 'smooth' for unseen terms)")
        return _log(n_docs / df, log_base)
    if kind == "smooth":
        return _log((1.0 + n_docs) / (1.0 + df), log_base) + 1.0
    raise ValueError(f"idf: {kind!r} is not allowed; use one of {', '.join(IDF_KINDS)}")


def tf_weights(counts, doc_lengths: np.ndarray, kind: TfKind = "relative"):
    """TF matrix from a CSR count matrix; ``doc_lengths`` are tokens per document (before vocab cuts)."""
    tf = counts.astype(np.float64, copy=True)
    if kind == "raw":
        return tf
    if kind == "binary":
        tf.data[:] = 1.0
        return tf
    if kind == "log":
        tf.data = 1.0 + np.log(tf.data)
        return tf
    if kind == "relative":
        lengths = np.asarray(doc_lengths, dtype=np.float64)
        per_entry = np.repeat(lengths, np.diff(tf.indptr))
        tf.data = tf.data / np.where(per_entry > 0, per_entry, 1.0)
        return tf
    raise ValueError(f"tf: {kind!r} is not allowed; use one of {', '.join(TF_KINDS)}")


def normalize_rows(m, norm: Norm = "none"):
    """Scale each row to unit L1 or L2 norm (empty rows stay empty)."""
    if norm == "none":
        return m
    out = m.astype(np.float64, copy=True)
    sq = out.multiply(out) if norm == "l2" else abs(out)
    totals = np.asarray(sq.sum(axis=1)).ravel()
    if norm == "l2":
        totals = np.sqrt(totals)
    totals[totals == 0] = 1.0
    out.data = out.data / np.repeat(totals, np.diff(out.indptr))
    return out


def tfidf(counts, doc_lengths: np.ndarray, idf: np.ndarray, tf: TfKind = "relative", norm: Norm = "none"):
    """TF-IDF = TF(t, d) * IDF(t), optionally row-normalized. Zero entries are dropped from the CSR."""
    from scipy import sparse

    weighted = tf_weights(counts, doc_lengths, tf) @ sparse.diags(np.asarray(idf, dtype=np.float64))
    weighted = sparse.csr_matrix(weighted)
    weighted.eliminate_zeros()
    return normalize_rows(weighted, norm)


def bag_of_words(token_ids: Sequence[Sequence[int]], vocab_size: int):
    """BoW counts for already-mapped documents: the sum of the one-hot vectors of their tokens."""
    rows = np.repeat(np.arange(len(token_ids)), [len(t) for t in token_ids])
    cols = np.fromiter((i for t in token_ids for i in t), dtype=np.int64, count=int(rows.size))
    return csr_from_triplets(rows, cols, np.ones(rows.size), (len(token_ids), vocab_size))


def one_hot(token_ids: Sequence[int], vocab_size: int):
    """One row per token with a single 1 at its vocabulary id (the teaching texts' one-hot vectors)."""
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size})")
    return csr_from_triplets(np.arange(ids.size), ids, np.ones(ids.size), (ids.size, vocab_size))
