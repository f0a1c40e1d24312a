"""Near-duplicate detection with MinHash LSH (rensa's Rust MinHash; banding and verification in numpy).

A document is a near-duplicate when it shares an LSH band with an *earlier* document and their
estimated Jaccard similarity (the fraction of equal MinHash values) reaches the threshold; it is then
dropped and records the earliest such document as ``duplicate_of``. Earlier means earlier in corpus
order, so the first occurrence is always kept.

Shingles are word n-grams (``shingle_size`` words; a document shorter than that is one shingle),
hashed to 64-bit tokens without a Python loop over documents (:func:`shingle_tokens`: polars splits and
hashes the words, numpy combines each window of ``shingle_size`` word hashes). rensa computes the
signatures in Rust from the flat token buffer (``digest_matrix_from_flat_token_hashes``); we chose it over
datasketch because it signs whole batches at once, which measured far faster here. Building the shingles
as Python strings (one ``" ".join`` per shingle) was 4.1 of 10.7 CPU-s for 49 MB, turning rensa's matrix
into numpy through nested lists another 4.9.

Memory, in two passes over the texts (:func:`near_duplicates_streamed`): the first computes signatures
``SIGNATURE_BATCH`` documents at a time and keeps only one 64-bit key per LSH band (9 x 8 bytes per
document instead of a 128 x 4-byte signature, which was ~4x the text of a short-sentence corpus); the
second recomputes the signatures of the documents that share a band with an earlier one, and only they
are compared. A signature depends on nothing but its document's text, so both passes give the same ones.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable
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


SIGNATURE_BATCH = 8192
WORD_SEED = 0x5EED
SHINGLE_BASE = 0x100000001B3  # the 64-bit FNV prime, an odd multiplier
EMPTY_TOKEN = 0x9E3779B97F4A7C15  # the one shingle of an empty document


def shingle_tokens(texts, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The shingles of each document as 64-bit token hashes, flat, with row offsets (``n + 1``, from 0).

    Words are runs of non-whitespace (``\\S+``, as ``str.split()`` finds them in cleaned text). A shingle is
    ``k`` consecutive words of one document; a document of at most ``k`` words is one shingle, an empty one
    a fixed token. Computed in polars and numpy, no Python loop over documents: each word is hashed with
    polars' ``Series.hash``, a shingle's hash is the polynomial ``sum(word_j * P**(k-1-j)) mod 2**64`` of its
    words' hashes, mixed with the splitmix64 finalizer. Polars does not promise the same ``hash`` across its
    versions, so the merge step puts polars' version in its identity when near-dedup is on.
    """
    import numpy as np

    flat, lens = _words(texts.fill_null(""))
    w = flat.hash(seed=WORD_SEED).to_numpy().astype(np.uint64, copy=False)
    n, total = len(lens), len(w)
    starts = np.cumsum(lens) - lens
    long = lens >= k
    ntok = np.where(long, lens - k + 1, 1)
    offsets = np.zeros(n + 1, dtype=np.uint64)
    np.cumsum(ntok, out=offsets[1:])
    tokens = np.empty(int(offsets[-1]), dtype=np.uint64)
    with np.errstate(over="ignore"):
        powers = [np.uint64(pow(SHINGLE_BASE, k - 1 - j, 1 << 64)) for j in range(k)]
        if total >= k and long.any():
            windows = total - k + 1
            acc = w[:windows] * powers[0]
            for j in range(1, k):
                acc += w[j:j + windows] * powers[j]
            doc = np.repeat(np.arange(n), lens)[:windows]
            valid = (np.arange(windows) - starts[doc]) <= (lens[doc] - k)
            tokens[np.repeat(long, ntok)] = acc[valid]
        short = np.flatnonzero(~long)
        if len(short):
            acc = np.zeros(len(short), dtype=np.uint64)
            for j in range(k - 1):
                has = lens[short] > j
                acc[has] += w[starts[short[has]] + j] * powers[j]
            acc[lens[short] == 0] = EMPTY_TOKEN
            tokens[offsets[:-1][short].astype(np.int64)] = acc
        return _mix64(tokens), offsets


IRREGULAR_SPACE = r"[^\S ]|  |^ | $"  # whitespace that is not one space between two words


def _words(texts) -> tuple[object, np.ndarray]:
    """(every word of every text, flat, in order; words per text). Words are ``\\S+`` runs. Cleaned text (the
    ``lm`` normalisation) has single spaces between words and none at the ends: then splitting on " " gives
    the same words, ~3x faster than extracting the regex matches; any other text takes the regex."""
    import numpy as np

    if texts.str.contains(IRREGULAR_SPACE).any():
        words = texts.str.extract_all(r"\S+")
        return words.explode().drop_nulls(), words.list.len().to_numpy().astype(np.int64)  # [] -> a null: dropped
    empty = texts.str.len_bytes() == 0
    words = texts.str.split(" ")
    lens, flat = words.list.len().to_numpy().astype(np.int64), words.explode()
    if empty.any():  # "" splits into one empty word
        lens[empty.to_numpy()] = 0
        flat = flat.filter(flat.str.len_bytes() > 0)
    return flat, lens


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer (Steele et al. 2014), elementwise on uint64 with wraparound."""
    import numpy as np

    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def signatures(texts, cfg: NearDedupConfig) -> np.ndarray:
    """(n_docs, num_perm) uint32 MinHash signatures of ``texts`` (a list of str or a polars Series)."""
    import array

    import numpy as np
    import polars as pl
    from rensa import RMinHash

    series = texts if isinstance(texts, pl.Series) else pl.Series("text", texts, dtype=pl.Utf8)
    n = series.len()
    if n == 0:
        return np.zeros((0, cfg.num_perm), dtype=np.uint32)
    tokens, offsets = shingle_tokens(series, cfg.shingle_size)
    rows = RMinHash.digest_matrix_from_flat_token_hashes(tokens, offsets, cfg.num_perm, cfg.seed).to_rows()
    # rensa hands the matrix back as nested lists of ints; array('I') packs them ~4x faster than np.array
    packed = array.array("I")
    if packed.itemsize != 4:  # pragma: no cover - a platform whose C unsigned int is not 32 bits
        return np.array(rows, dtype=np.uint32).reshape(n, cfg.num_perm)
    packed.extend(itertools.chain.from_iterable(rows))
    return np.frombuffer(packed, dtype=np.uint32).reshape(n, cfg.num_perm)


def band_keys(sig: np.ndarray, cfg: NearDedupConfig) -> np.ndarray:
    """(n_docs, bands) uint64: one key per LSH band, the band's ``rows`` values folded into 64 bits. Two
    documents share a key when their band is equal (and, with probability ~n^2 / 2^64, by accident: such a
    pair is a candidate like any other, and is kept only if the full signatures agree)."""
    import numpy as np

    bands, rows = lsh_params(cfg.threshold, cfg.num_perm)
    keys = np.empty((len(sig), bands), dtype=np.uint64)
    base = np.uint64(SHINGLE_BASE)
    with np.errstate(over="ignore"):
        for b in range(bands):
            acc = sig[:, b * rows].astype(np.uint64)
            for j in range(b * rows + 1, (b + 1) * rows):
                acc *= base
                acc += sig[:, j]
            keys[:, b] = _mix64(acc)
    return keys


def near_duplicate_of(texts, cfg: NearDedupConfig) -> np.ndarray:
    """For each document, the index of the earliest earlier document it near-duplicates, or -1."""
    return near_duplicates_streamed(lambda: [texts], len(texts), cfg)


def near_duplicates(sig: np.ndarray, cfg: NearDedupConfig) -> np.ndarray:
    """:func:`near_duplicate_of` on signatures already computed (one row per document, corpus order)."""
    import numpy as np

    cand = _candidates(band_keys(sig, cfg))
    return _verify(cand, np.arange(len(sig)), sig, cfg.threshold)


def near_duplicates_streamed(batches: Callable[[], Iterable], n_docs: int, cfg: NearDedupConfig) -> np.ndarray:
    """:func:`near_duplicate_of` for documents that arrive in batches (lists of str or polars Series, in
    corpus order); ``batches()`` is called twice and must give the same texts both times. Memory: the band
    keys of every document, plus the signatures of the documents that have a candidate (see the module)."""
    import numpy as np

    keys = np.empty((n_docs, lsh_params(cfg.threshold, cfg.num_perm)[0]), dtype=np.uint64)
    at = 0
    for texts in _rebatched(batches()):
        part = band_keys(signatures(texts, cfg), cfg)
        if at + len(part) > n_docs:
            raise ValueError(f"expected {n_docs} documents for near-dedup, got more")
        keys[at:at + len(part)] = part
        at += len(part)
    if at != n_docs:
        raise ValueError(f"expected {n_docs} documents for near-dedup, got {at}")
    cand = _candidates(keys)
    del keys
    involved = np.flatnonzero((cand < n_docs).any(axis=1))
    rows = np.union1d(involved, cand[involved][cand[involved] < n_docs])
    sig = np.empty((len(rows), cfg.num_perm), dtype=np.uint32)
    at = done = 0
    for texts in _rebatched(batches()):
        size = len(texts)
        lo, hi = np.searchsorted(rows, [at, at + size])
        if hi > lo:
            local = rows[lo:hi] - at
            sig[lo:hi] = signatures(_gather(texts, local), cfg)
            done += hi - lo
        at += size
    if done != len(rows):
        raise ValueError(f"near-dedup: the second pass over the texts gave {at} documents, the first {n_docs}")
    return _verify(cand, rows, sig, cfg.threshold)


def _rebatched(batches: Iterable):
    """Each batch in slices of at most ``SIGNATURE_BATCH`` documents (a whole shard may be large)."""
    for texts in batches:
        for start in range(0, len(texts), SIGNATURE_BATCH):
            yield texts[start:start + SIGNATURE_BATCH]


def _gather(texts, local: np.ndarray):
    import polars as pl

    if isinstance(texts, pl.Series):
        return texts.gather(local)
    return [texts[i] for i in local.tolist()]


def _candidates(keys: np.ndarray) -> np.ndarray:
    """(n, bands): per band, the earliest document with the same key if it comes before this one, else n."""
    import numpy as np

    n = len(keys)
    dtype = np.int32 if n < 2**31 - 1 else np.int64
    cand = np.empty(keys.shape, dtype=dtype)
    own = np.arange(n, dtype=dtype)
    for b in range(keys.shape[1]):
        _, first, inverse = np.unique(keys[:, b], return_index=True, return_inverse=True)
        earliest = first.astype(dtype)[inverse.ravel()]
        cand[:, b] = np.where(earliest < own, earliest, n)
    return cand


def _verify(cand: np.ndarray, rows: np.ndarray, sig: np.ndarray, threshold: float) -> np.ndarray:
    """Keep a candidate when the estimated Jaccard (fraction of equal signature values) reaches the
    threshold, trying each document's candidates earliest first. ``sig[i]`` is document ``rows[i]``'s
    signature (``rows`` sorted; every document with a candidate, and every candidate, is among them)."""
    import numpy as np

    n = len(cand)
    result = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return result
    order = np.arange(n)
    for column in np.argsort(cand, axis=1, kind="stable").T:
        pick = cand[order, column].astype(np.int64)
        todo = (result < 0) & (pick < n)
        if not todo.any():
            break
        idx = order[todo]
        a, b = sig[np.searchsorted(rows, idx)], sig[np.searchsorted(rows, pick[todo])]
        hit = (a == b).mean(axis=1) >= threshold
        result[idx[hit]] = pick[todo][hit]
    return result
