"""Near-duplicate detection with MinHash LSH (rensa's Rust MinHash; banding and verification in numpy).

A document is a near-duplicate when it shares an LSH band with an *earlier* document and their
estimated Jaccard similarity (the fraction of equal MinHash values) reaches the threshold; it is then
dropped and records the earliest such document as ``duplicate_of``. Earlier means earlier in corpus
order, so the first occurrence is always kept.

Shingles are word n-grams (``shingle_size`` words; a document shorter than that is one shingle).
Building the shingle sets is a per-document Python loop: rensa takes token sets, and no vectorized
expression builds word n-grams (a polars explode/shift/group-by version measured 1.6x slower, most of
it in handing the lists back to Python). We chose rensa over datasketch because it computes the
signatures in Rust for whole batches (``digest_matrix_from_token_sets``), which measured far faster here.

Memory: a document's signature depends on nothing but its text, so signatures are computed in batches
of ``SIGNATURE_BATCH`` documents (:func:`streamed_signatures`) into one ``(n, num_perm)`` uint32 matrix:
only the current batch's shingle lists exist at any time (the whole corpus' lists took ~5 GB for a
50 MB corpus), and the LSH banding then works on the signatures alone.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: validating a corpus config stays numpy-free
    import numpy as np


@dataclass(frozen=True)
class NearDedupConfig:
    """MinHash LSH near-duplicate removal (off by default)."""

    enabled: bool = field(default=False, metadata={"doc": "Drop near-duplicates (MinHash LSH), keeping the first."})
    threshold: float = field(default=0.8, metadata={"doc": "Estimated Jaccard similarity at or above which two documents are near-duplicates."})
    shingle_size: int = field(default=5, metadata={"doc": "Words per shingle."})
    num_perm: int = field(default=128, metadata={"doc": "MinHash permutations (signature length)."})
    seed: int = field(default=1, metadata={"doc": "MinHash seed (fixed for reproducible results)."})

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold: must be in (0, 1], got {self.threshold}")
        if self.shingle_size < 1:
            raise ValueError(f"shingle_size: must be >= 1, got {self.shingle_size}")
        if self.num_perm < 16 or self.num_perm > 1024:
            raise ValueError(f"num_perm: must be between 16 and 1024, got {self.num_perm}")


@functools.lru_cache(maxsize=64)
def lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows) minimising the false-positive area below the threshold plus the false-negative
    area above it, with equal weights (the criterion datasketch's MinHashLSH uses)."""
    import numpy as np
    xs_fp = np.linspace(0.0, threshold, 200)
    xs_fn = np.linspace(threshold, 1.0, 200)
    best = None
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            fp = np.trapezoid(1 - (1 - xs_fp ** rows) ** bands, xs_fp)
            fn = np.trapezoid((1 - xs_fn ** rows) ** bands, xs_fn)
            if best is None or fp + fn < best[0]:
                best = (fp + fn, bands, rows)
    return best[1], best[2]


def shingles(text: str, k: int) -> list[str]:
    words = text.split()
    if len(words) <= k:
        return [" ".join(words)] if words else [""]
    return [" ".join(words[i:i + k]) for i in range(len(words) - k + 1)]


SIGNATURE_BATCH = 8192


def signatures(texts: list[str], cfg: NearDedupConfig) -> np.ndarray:
    """(n_docs, num_perm) uint32 MinHash signatures."""
    import numpy as np
    from rensa import RMinHash

    if not texts:
        return np.zeros((0, cfg.num_perm), dtype=np.uint32)
    sets = [shingles(t, cfg.shingle_size) for t in texts]
    matrix = RMinHash.digest_matrix_from_token_sets(sets, cfg.num_perm, cfg.seed)
    # np.array with a dtype converts the nested lists ~20x faster than np.asarray without one
    return np.array(matrix.to_rows(), dtype=np.uint32).reshape(len(texts), cfg.num_perm)


def streamed_signatures(batches: Iterable[list[str]], n_docs: int, cfg: NearDedupConfig) -> np.ndarray:
    """Signatures of ``n_docs`` documents that arrive in batches of texts, in corpus order."""
    import numpy as np
    sig = np.empty((n_docs, cfg.num_perm), dtype=np.uint32)
    at = 0
    for texts in batches:
        for start in range(0, len(texts), SIGNATURE_BATCH):
            part = signatures(texts[start:start + SIGNATURE_BATCH], cfg)
            sig[at:at + len(part)] = part
            at += len(part)
    if at != n_docs:
        raise ValueError(f"expected {n_docs} documents for near-dedup, got {at}")
    return sig


def near_duplicate_of(texts: list[str], cfg: NearDedupConfig) -> np.ndarray:
    """For each document, the index of the earliest earlier document it near-duplicates, or -1."""
    return near_duplicates(streamed_signatures([texts], len(texts), cfg), cfg)


def near_duplicates(sig: np.ndarray, cfg: NearDedupConfig) -> np.ndarray:
    """:func:`near_duplicate_of` on signatures already computed (one row per document, corpus order)."""
    import numpy as np
    n = len(sig)
    result = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return result
    bands, rows = lsh_params(cfg.threshold, cfg.num_perm)
    order = np.arange(n)
    candidates = []
    for b in range(bands):
        band = np.ascontiguousarray(sig[:, b * rows:(b + 1) * rows])
        keys = band.view(np.dtype((np.void, band.dtype.itemsize * rows))).ravel()
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        candidates.append(first[inverse.ravel()])  # the first document with the same band value
    cand = np.stack(candidates, axis=1)  # (n, bands)
    cand = np.where(cand < order[:, None], cand, n)  # only earlier documents count
    # Verify candidates by estimated Jaccard, earliest first.
    for column in np.argsort(cand, axis=1).T:
        pick = cand[order, column]
        todo = (result < 0) & (pick < n)
        if not todo.any():
            break
        idx = order[todo]
        similarity = (sig[idx] == sig[pick[todo]]).mean(axis=1)
        hit = similarity >= cfg.threshold
        result[idx[hit]] = pick[todo][hit]
    return result
