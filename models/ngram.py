"""N-gram language models: smoothing math on count tables (pure numpy; no storage, no SQL).

Input: the vocabulary (ids 0, 1, 2 = ``<unk>``, ``<s>``, ``</s>``, as KenLM numbers them) and, per order
n = 1..N, the raw counts of every n-gram of the sentences ``<s> w1 .. wk </s>`` (one ``<s>``, no padding).
Output: a :class:`BackoffModel`: per order, the n-grams with a log10 probability and a log10 backoff
weight, queried the ARPA way::

    log10 p(w | h) = log10 p(longest stored n-gram h' w) + sum of backoff(c) over the stored contexts c
                     of h that are longer than h'

Smoothing methods
-----------------
- ``modified-kneser-ney``: interpolated modified Kneser-Ney exactly as KenLM ``lmplz`` estimates it
  (lm/builder/adjust_counts.cc, initial_probabilities.cc, interpolate.cc):

  * adjusted counts a(.): the highest order keeps raw counts; a lower-order n-gram gets its continuation
    count, the number of distinct words seen to its left; n-grams starting with ``<s>`` (nothing can
    precede them) keep their raw counts; the unigram ``<s>`` has count 0 and so has an unseen ``<unk>``;
  * per order, counts-of-counts n1..n4 of the adjusted counts give Y = n1 / (n1 + 2 n2) and
    D_k = k - (k + 1) Y n_{k+1} / n_k for k = 1, 2, 3 (D3 applies to every count >= 3);
  * fallback (documented choice, like ``lmplz --discount_fallback``): when some n_k (k = 1..4) of an
    order is 0 or a D_k falls outside [0, k], that order uses D = (0.5, 1.0, 1.5) instead, and the
    model's ``discount_fallback`` lists the order;
  * p(w | h) = (a(hw) - D(a(hw))) / sum_x a(hx) + gamma(h) p(w | h minus its first word), with
    gamma(h) = (D1 N1(h.) + D2 N2(h.) + D3 N3+(h.)) / sum_x a(hx); the unigram level interpolates with
    the uniform distribution over the vocabulary without ``<s>`` (so with ``<unk>``);
  * backoff(h) = gamma(h) for every n-gram h that is the context of a longer n-gram, else 0 (log10: 0).
  * ``<s>`` is never predicted; its unigram log10 probability is written as 0, as lmplz writes it.
  * pruning (``prune``, lmplz's ``--prune``): thresholds t_1..t_N (t_1 = 0, non-decreasing, the last one
    repeated up to N); an n-gram of order n >= 2 whose RAW count is <= t_n is left out of the model
    (lmplz compares its "actual" counts, the raw ones, not the adjusted counts). Contexts and suffixes of
    a kept n-gram have a raw count at least as large, so they are kept too (enforced anyway). Discounts
    and denominators still come from every n-gram; a pruned n-gram's whole adjusted count moves into its
    context's gamma: gamma(h) = (sum over kept children D(a) + sum over pruned children a) / sum_x a(hx),
    so p(. | h) still sums to 1 with the backoff (lm/builder/adjust_counts.cc, initial_probabilities.cc).
- ``kneser-ney``: the same with one discount per order, D = Y = n1 / (n1 + 2 n2) (fallback 0.5).
- ``mle``: p(w | h) = c(hw) / c(h.) with the full history (shorter only at the sentence start);
  anything unseen has probability 0 (log10 -inf; perplexity inf).
- ``add-k``: p(w | h) = (c(hw) + k) / (c(h.) + k V); V = vocabulary without ``<s>`` unless given
  (Laplace is k = 1). Stored so the backoff query is exact: lower-order entries carry the uniform 1/V
  and the history's backoff weight carries k / (c(h.) + k V) / (1/V).
- ``stupid-backoff`` (Brants et al. 2007): S(w | h) = c(hw) / c(h.) if seen, else alpha S(w | shorter h),
  S(w) = c(w) / N. These are SCORES, NOT PROBABILITIES (they do not sum to 1); ``is_probability`` is False.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

UNK, BOS, EOS = "<unk>", "<s>", "</s>"
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
METHODS = ("mle", "add-k", "stupid-backoff", "kneser-ney", "modified-kneser-ney")
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)
NEG_INF = float("-inf")

Table = tuple[np.ndarray, np.ndarray]  # (ids int32 (m, n), counts int64 (m,))


# ----------------------------------------------------------------------------------------------- counting
def count_sentences(sentences: Iterable[Sequence[str]], order: int) -> tuple[list[str], list[Table]]:
    """Reference counter in pure Python (for tests and tiny data); the same ids as corpusforge.storage.ngram_counts."""
    from collections import Counter

    sents = [list(s) for s in sentences if len(s)]
    words = Counter(w for s in sents for w in s)
    for special in (BOS, EOS):
        if special in words:
            raise ValueError(f"the text contains the reserved token {special!r}")
    vocab = [UNK, BOS, EOS] + sorted((w for w in words if w != UNK), key=lambda w: (-words[w], w))
    index = {w: i for i, w in enumerate(vocab)}
    grams: list[Counter] = [Counter() for _ in range(order)]
    for s in sents:
        seq = [BOS_ID] + [index[w] for w in s] + [EOS_ID]
        for n in range(1, order + 1):
            for i in range(len(seq) - n + 1):
                grams[n - 1][tuple(seq[i:i + n])] += 1
    tables = []
    for n, c in enumerate(grams, start=1):
        items = sorted(c.items())
        ids = np.array([k for k, _ in items], dtype=np.int32).reshape(len(items), n)
        tables.append((ids, np.array([v for _, v in items], dtype=np.int64)))
    return vocab, tables


# ------------------------------------------------------------------------------------------- trie index
class TrieIndex:
    """Exact lookup of id tuples: order n's rows sorted by key = index(prefix in order n-1) * V + last word.

    Order 1 holds every vocabulary id (row i is word i), so any tuple's index is found by n - 1
    ``searchsorted`` passes; rows of one context are contiguous (its children).
    """

    def __init__(self, vocab_size: int):
        self.V = int(vocab_size)
        self.keys: list[np.ndarray] = [np.arange(self.V, dtype=np.int64)]

    def index_of(self, ids: np.ndarray) -> np.ndarray:
        """Row index of each id tuple (m, k) in order k's table, -1 where absent (k <= orders built)."""
        ids = np.asarray(ids)
        idx = ids[:, 0].astype(np.int64)
        for j in range(1, ids.shape[1]):
            idx = self.extend(idx, ids[:, j], j + 1)
        return idx

    def extend(self, prefix_idx: np.ndarray, word: np.ndarray, order: int) -> np.ndarray:
        """Index in ``order``'s table of (prefix row of order-1, word); -1 where absent or prefix is -1."""
        keys = self.keys[order - 1]
        key = prefix_idx * self.V + np.asarray(word, dtype=np.int64)
        pos = np.searchsorted(keys, key)
        pos_c = np.minimum(pos, len(keys) - 1)
        ok = (prefix_idx >= 0) & (len(keys) > 0) & (keys[pos_c] == key) if len(keys) else np.zeros(len(key), bool)
        return np.where(ok, pos_c, -1)

    def add_order(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Register the next order's rows; return (permutation sorting them, prefix index per sorted row)."""
        n = ids.shape[1]
        prefix = self.index_of(ids[:, :-1])
        if (prefix < 0).any():
            bad = ids[np.argmax(prefix < 0)].tolist()
            raise ValueError(f"order {n}: the prefix of n-gram {bad} is not an order-{n - 1} n-gram")
        key = prefix * self.V + ids[:, -1].astype(np.int64)
        perm = np.argsort(key, kind="stable")
        key = key[perm]
        if len(key) > 1 and (key[1:] == key[:-1]).any():
            raise ValueError(f"order {n}: duplicate n-grams")
        self.keys.append(key)
        return perm, prefix[perm]

    def children(self, order: int, parent: int) -> tuple[int, int]:
        """[lo, hi) rows of ``order`` whose context is row ``parent`` of order - 1."""
        keys = self.keys[order - 1]
        lo = np.searchsorted(keys, parent * self.V)
        return int(lo), int(np.searchsorted(keys, (parent + 1) * self.V))


def _full_unigrams(table: Table, V: int) -> np.ndarray:
    counts = np.zeros(V, dtype=np.int64)
    ids, c = table
    np.add.at(counts, ids[:, 0], c)
    return counts


# ------------------------------------------------------------------------------------------- the model
@dataclass
class BackoffModel:
    """An ARPA-shaped model: per order, n-grams (trie order), log10 probability and log10 backoff."""

    words: list[str]
    ids: list[np.ndarray]
    logprob: list[np.ndarray]
    backoff: list[np.ndarray]
    method: str = "modified-kneser-ney"
    is_probability: bool = True
    missing_context_backoff: float = 0.0  # log10 weight for a context that is not stored (stupid backoff)
    info: dict[str, Any] = field(default_factory=dict)
    trie: TrieIndex | None = None

    def __post_init__(self) -> None:
        if self.trie is None:
            self.trie = TrieIndex(len(self.words))
            if len(self.ids[0]) != len(self.words) or (self.ids[0][:, 0] != np.arange(len(self.words))).any():
                raise ValueError("unigram table must hold every vocabulary id in order")
            for n in range(2, self.order + 1):
                perm, _ = self.trie.add_order(self.ids[n - 1])
                if (perm != np.arange(len(perm))).any():
                    self.ids[n - 1] = self.ids[n - 1][perm]
                    self.logprob[n - 1] = self.logprob[n - 1][perm]
                    self.backoff[n - 1] = self.backoff[n - 1][perm]
        self._word_index: dict[str, int] | None = None

    @property
    def order(self) -> int:
        return len(self.ids)

    @property
    def word_index(self) -> dict[str, int]:
        if self._word_index is None:
            self._word_index = {w: i for i, w in enumerate(self.words)}
        return self._word_index

    def encode(self, tokens: Sequence[str]) -> tuple[np.ndarray, int]:
        """Word ids (OOV -> <unk>) and the number of OOV tokens: KenLM's definition, every token whose id is
        <unk>'s, so a literal ``<unk>`` in the text is an OOV too (it is the unknown-word entry)."""
        index = self.word_index
        ids = np.fromiter((index.get(t, UNK_ID) for t in tokens), dtype=np.int64, count=len(tokens))
        return ids, int((ids == UNK_ID).sum())

    # --------------------------------------------------------------------------------------- scoring
    def _ngram_rows(self, sentences: Sequence[np.ndarray]) -> tuple[np.ndarray, list]:
        """For ``<s> s </s>`` streams: history length per position and, per order j, the row of the
        order-j n-gram ending there (-1 if not stored or crossing the sentence start)."""
        N = self.order
        lengths = np.array([len(s) + 2 for s in sentences], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        bos, eos = np.array([BOS_ID], dtype=np.int64), np.array([EOS_ID], dtype=np.int64)
        seq = np.concatenate([part for s in sentences for part in (bos, np.asarray(s, dtype=np.int64), eos)])
        T = len(seq)
        start_of = np.repeat(starts, lengths)
        hist = np.arange(T) - start_of  # history length available at each position
        # idx[j][t]: row of the order-j n-gram ending at t (-1 if absent or crossing the sentence start)
        idx = [None, seq.copy()]
        for j in range(2, N + 1):
            prev = np.full(T, -1, dtype=np.int64)
            prev[1:] = idx[j - 1][:-1]
            prev[hist < j - 1] = -1
            idx.append(self.trie.extend(prev, seq, j))
        return hist, idx

    def score_streams(self, sentences: Sequence[np.ndarray]) -> np.ndarray:
        """log10 p of every predicted token (words and </s>; not <s>) of id sentences, in order."""
        N = self.order
        if not sentences:
            return np.zeros(0)
        hist, idx = self._ngram_rows(sentences)
        T = len(hist)
        scored = hist > 0
        L = np.minimum(hist, N - 1)
        best = np.zeros(T, dtype=np.int64)  # matched order
        for j in range(1, N + 1):
            best = np.where((idx[j] >= 0) & (j <= L + 1), j, best)
        logp = np.zeros(T)
        for j in range(1, N + 1):
            sel = best == j
            logp[sel] = self.logprob[j - 1][idx[j][sel]]
        for j in range(1, N):  # backoff of the context of length j ending at t-1, for j >= matched order
            ctx = np.full(T, -1, dtype=np.int64)
            ctx[1:] = idx[j][:-1]
            use = (j >= best) & (j <= L)
            found = use & (ctx >= 0)
            logp[found] += self.backoff[j - 1][ctx[found]]
            missing = use & (ctx < 0)
            if missing.any():
                logp[missing] += self.missing_context_backoff
        return logp[scored]

    def unseen_fractions(self, sentences: Sequence[np.ndarray]) -> dict[int, float]:
        """Per order n >= 2: the fraction of the n-gram occurrences of the text that the model never stored
        (for count-based models: never seen in training). The sparsity problem, measured."""
        if not sentences:
            return {}
        hist, idx = self._ngram_rows(sentences)
        out = {}
        for n in range(2, self.order + 1):
            valid = hist >= n - 1  # every n-gram ending at a predicted token
            total = int(valid.sum())
            out[n] = float((idx[n][valid] < 0).sum() / total) if total else 0.0
        return out

    def score_sentence(self, tokens: Sequence[str]) -> float:
        """log10 p(</s>, w_k .. w_1 | <s>) of one sentence (<s> not scored, </s> scored), like KenLM."""
        ids, _ = self.encode(list(tokens))
        return float(self.score_streams([ids]).sum())

    def evaluate(self, sentences: Iterable[Sequence[str]]) -> dict[str, Any]:
        """KenLM's perplexity convention: every word and </s> scored, <s> not; OOVs score p(<unk>).

        OOVs are KenLM ``query``'s: the tokens that map to <unk> (id 0), a literal ``<unk>`` included.
        ``perplexity_without_oov`` is ``query``'s "Perplexity excluding OOVs": the log10 probabilities of the
        other tokens and every </s>, over their number."""
        encoded, oov_total, oov_mask = [], 0, []
        for toks in sentences:
            ids, oov = self.encode(list(toks))
            encoded.append(ids)
            oov_total += oov
            oov_mask.append(np.append(ids == UNK_ID, False))
        logp = self.score_streams(encoded)
        oov_mask = np.concatenate(oov_mask) if oov_mask else np.zeros(0, bool)
        tokens = len(logp)
        total = float(logp.sum())
        known = logp[~oov_mask]
        words = tokens - len(encoded)
        return {
            "sentences": len(encoded),
            "words": words,
            "tokens": tokens,
            "oov": int(oov_total),
            "oov_rate": oov_total / words if words else 0.0,
            "log10_prob": total,
            "perplexity": _ppl(total, tokens),
            "perplexity_without_oov": _ppl(float(known.sum()), len(known)),
        }

    def log10_prob(self, word: str, context: Sequence[str] = ()) -> float:
        """log10 P(word | context); the context is truncated to the model's order - 1 last words."""
        ctx = [self.word_index.get(w, UNK_ID) for w in list(context)[-(self.order - 1):]] if self.order > 1 else []
        dist = self._next_distribution(ctx)
        return float(dist[self.word_index.get(word, UNK_ID)])

    def top_next(self, context: Sequence[str] = (), k: int = 5) -> list[tuple[str, float]]:
        """The k most likely next words (log10 p), <s> excluded."""
        ctx = [self.word_index.get(w, UNK_ID) for w in list(context)[-(self.order - 1):]] if self.order > 1 else []
        dist = self._next_distribution(ctx)
        dist[BOS_ID] = NEG_INF
        top = np.argsort(-dist, kind="stable")[:k]
        return [(self.words[i], float(dist[i])) for i in top]

    def _next_distribution(self, ctx: list[int]) -> np.ndarray:
        """log10 p(w | ctx) for every w; a context beginning with <s> is a sentence start."""
        if BOS_ID in ctx:
            ctx = ctx[len(ctx) - 1 - ctx[::-1].index(BOS_ID):]
        dist = self.logprob[0].copy()
        for j in range(1, len(ctx) + 1):
            parent = int(self.trie.index_of(np.array([ctx[-j:]]))[0])
            if parent < 0:
                dist += self.missing_context_backoff
                continue
            dist += self.backoff[j - 1][parent]
            lo, hi = self.trie.children(j + 1, parent)
            dist[self.ids[j][lo:hi, -1]] = self.logprob[j][lo:hi]
        return dist


def _ppl(log10_total: float, n: int) -> float:
    if n == 0:
        return float("nan")
    return float(10.0 ** (-log10_total / n))


# ------------------------------------------------------------------------------------- estimation
@dataclass
class _Orders:
    """Sorted count tables with their trie structure (shared by every estimator)."""

    V: int
    ids: list[np.ndarray]
    counts: list[np.ndarray]
    prefix: list[np.ndarray]  # per order: row index of the context in order n-1 (order 1: zeros)
    suffix: list[np.ndarray]  # per order: row index of the n-gram minus its first word (order 1: -1)
    trie: TrieIndex


def _sorted_extend(trie: TrieIndex, prefix_idx: np.ndarray, word: np.ndarray, order: int) -> np.ndarray:
    """``trie.extend`` for queries in any order, run on sorted queries (cache-friendly searchsorted)."""
    key = prefix_idx * trie.V + word.astype(np.int64)
    if len(key) > 1 and (key[1:] < key[:-1]).any():
        perm = np.argsort(key, kind="stable")  # radix/timsort: faster than quicksort on these keys
        out = np.empty(len(key), dtype=np.int64)
        out[perm] = trie.extend(prefix_idx[perm], word[perm], order)
        return out
    return trie.extend(prefix_idx, word, order)


def _prepare(words: Sequence[str], tables: Sequence[Table], contexts: Sequence[np.ndarray] | None = None) -> _Orders:
    """Sort every order into trie (= lexicographic) order and link each row to its context (prefix)
    and to its lower-order n-gram (suffix). All lookups are exact ``searchsorted`` on sorted keys.

    ``contexts`` (optional, from the counter): per order n >= 2, the row of each n-gram's context in order
    n-1 (order 2: its first word id), with the rows already sorted. It saves the prefix searches; it is
    checked (sorted, distinct, each context row holding the n-gram's first n-1 ids), never trusted blindly.
    """
    V = len(words)
    trie = TrieIndex(V)
    uni = _full_unigrams(tables[0], V)
    ids = [np.arange(V, dtype=np.int32).reshape(V, 1)]
    counts = [uni]
    prefix = [np.zeros(V, dtype=np.int64)]
    suffix = [np.full(V, -1, dtype=np.int64)]
    for n in range(2, len(tables) + 1):
        t_ids = np.asarray(tables[n - 1][0], dtype=np.int32)
        t_counts = np.asarray(tables[n - 1][1], dtype=np.int64)
        if contexts is not None:
            pre = _checked_contexts(np.asarray(contexts[n - 1], dtype=np.int64), t_ids, ids[n - 2], n)
        else:
            t_ids, t_counts = _lexicographic(t_ids, t_counts)
            pre = t_ids[:, 0].astype(np.int64)
            for j in range(1, n - 1):  # walk down the trie: sorted queries, one searchsorted per level
                pre = trie.extend(pre, t_ids[:, j], j + 1)
        if (pre < 0).any():
            bad = t_ids[np.argmax(pre < 0)].tolist()
            raise ValueError(f"order {n}: the prefix of n-gram {bad} is not an order-{n - 1} n-gram")
        key = pre * V + t_ids[:, -1].astype(np.int64)
        if len(key) > 1 and (key[1:] <= key[:-1]).any():
            what = "duplicate n-grams" if (key[1:] == key[:-1]).any() else "rows not in lexicographic order"
            raise ValueError(f"order {n}: {what}")
        trie.keys.append(key)
        # the suffix w2..wn = (suffix of the context w2..w(n-1), wn)
        suf = t_ids[:, 1].astype(np.int64) if n == 2 else _sorted_extend(trie, suffix[n - 2][pre], t_ids[:, -1], n - 1)
        if (suf < 0).any():
            raise ValueError(f"order {n}: an n-gram's suffix is missing from order {n - 1}")
        ids.append(t_ids)
        counts.append(t_counts)
        prefix.append(pre)
        suffix.append(suf)
    return _Orders(V, ids, counts, prefix, suffix, trie)


def _lexicographic(t_ids: np.ndarray, t_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows in lexicographic order (sorted only when they are not already)."""
    if len(t_ids) > 1:
        diff = np.diff(t_ids.astype(np.int64), axis=0)
        first = np.argmax(diff != 0, axis=1)
        if (diff[np.arange(len(diff)), first] <= 0).any():
            perm = np.lexsort(t_ids.T[::-1])
            return t_ids[perm], t_counts[perm]
    return t_ids, t_counts


def _checked_contexts(pre: np.ndarray, t_ids: np.ndarray, lower_ids: np.ndarray, n: int) -> np.ndarray:
    """Given context rows, verified against the ids (one vectorized comparison, no search)."""
    if pre.shape != (len(t_ids),):
        raise ValueError(f"order {n}: {len(pre)} context rows for {len(t_ids)} n-grams")
    if len(pre) and (pre.min() < 0 or pre.max() >= len(lower_ids)):
        raise ValueError(f"order {n}: a context row is outside order {n - 1}'s table")
    if len(pre) and not np.array_equal(lower_ids[pre], t_ids[:, :-1]):
        raise ValueError(f"order {n}: a context row does not hold the n-gram's first {n - 1} words")
    return pre


def adjusted_counts(o: _Orders) -> list[np.ndarray]:
    """KenLM's adjusted counts (see the module docstring), aligned with the sorted tables."""
    N = len(o.ids)
    adjusted = []
    for n in range(1, N + 1):
        if n == N:
            a = o.counts[n - 1].copy()
        else:
            a = np.bincount(o.suffix[n], minlength=len(o.ids[n - 1])).astype(np.int64)
            bos = o.ids[n - 1][:, 0] == BOS_ID
            a[bos] = o.counts[n - 1][bos]
        if n == 1:
            a[BOS_ID] = 0
        adjusted.append(a)
    return adjusted


def count_of_counts(adjusted: np.ndarray, max_count: int = 4) -> list[int]:
    """[n_1, ..., n_max]: how many n-grams have adjusted count exactly k."""
    binc = np.bincount(np.minimum(adjusted, max_count + 1), minlength=max_count + 2)
    return [int(binc[k]) for k in range(1, max_count + 1)]


def kenlm_discounts(n: Sequence[int]) -> tuple[tuple[float, float, float], bool]:
    """(D1, D2, D3+) from counts-of-counts n1..n4 (Chen & Goodman eq. 26), and whether it fell back."""
    n1, n2, n3, n4 = (float(x) for x in n[:4])
    if min(n1, n2, n3, n4) <= 0:
        return FALLBACK_DISCOUNTS, True
    y = n1 / (n1 + 2.0 * n2)
    d = tuple(k - (k + 1) * y * nk1 / nk for k, nk, nk1 in ((1, n1, n2), (2, n2, n3), (3, n3, n4)))
    if any(dk < 0.0 or dk > k for k, dk in zip((1, 2, 3), d)):
        return FALLBACK_DISCOUNTS, True
    return d, False  # type: ignore[return-value]


def kn_discount(n: Sequence[int]) -> tuple[float, bool]:
    """The single Kneser-Ney discount D = n1 / (n1 + 2 n2) (fallback 0.5)."""
    n1, n2 = float(n[0]), float(n[1])
    if n1 <= 0 or n2 <= 0:
        return 0.5, True
    return n1 / (n1 + 2.0 * n2), False


def _log10(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log10(x)


def estimate(
    words: Sequence[str],
    tables: Sequence[Table],
    method: str = "modified-kneser-ney",
    k: float = 1.0,
    vocab_size: int | None = None,
    alpha: float = 0.4,
    discounts: dict[int, Sequence[float]] | None = None,
    contexts: Sequence[np.ndarray] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    prune: Sequence[int] | None = None,
) -> BackoffModel:
    """Estimate a smoothed model from raw count tables (orders 1..N).

    ``discounts`` ({order: (D1, D2, D3+)}, Kneser-Ney only) replaces the discounts computed from the
    counts-of-counts for those orders (for experiments, and to reproduce another tool's choice).
    ``contexts``: the counter's context rows per order (corpusforge.storage.ngram_counts.NgramTables.contexts), which
    spare the estimator its own prefix searches; the tables must then be in lexicographic order.
    ``on_progress(done, N)``: 0 once the tables are prepared, then per order as Kneser-Ney's probabilities
    are computed (the other methods report N at the end).
    ``prune``: lmplz's ``--prune`` thresholds per order (Kneser-Ney only; see the module docstring and
    :func:`prune_thresholds`); None, empty or all zero: no pruning.
    """
    if method not in METHODS:
        raise ValueError(f"method: use one of {', '.join(METHODS)}")
    thresholds = prune_thresholds(prune, len(tables))
    if thresholds and method not in ("kneser-ney", "modified-kneser-ney"):
        raise ValueError(f"prune: only kneser-ney and modified-kneser-ney models are pruned, not {method}")
    o = _prepare(words, tables, contexts)
    if on_progress:
        on_progress(0, len(o.ids))
    if method in ("kneser-ney", "modified-kneser-ney"):
        return _kneser_ney(list(words), o, modified=method == "modified-kneser-ney", given=discounts or {},
                           on_progress=on_progress, prune=thresholds)
    if method == "stupid-backoff":
        model = _stupid_backoff(list(words), o, alpha)
    else:
        model = _add_k(list(words), o, 0.0 if method == "mle" else k, vocab_size, method)
    if on_progress:
        on_progress(len(o.ids), len(o.ids))
    return model


def prune_thresholds(prune: Sequence[int] | None, order: int) -> list[int] | None:
    """lmplz's ``--prune`` list checked and padded to ``order`` thresholds (the last one repeated); None when it
    prunes nothing (None, empty or all zero). Rules (lmplz's): at most ``order`` values, integers >= 0, the
    first (unigrams) 0, non-decreasing (otherwise a context of a kept n-gram could be pruned)."""
    if not prune:
        return None
    values = list(prune)
    if len(values) > order:
        raise ValueError(f"prune: {len(values)} thresholds for a model of order {order}; give at most one per order")
    if any(isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0 for t in values):
        raise ValueError(f"prune: thresholds must be integers >= 0, got {values}")
    if values[0] != 0:
        raise ValueError(f"prune: the first (unigram) threshold must be 0, got {values[0]}; unigrams are never pruned")
    if any(b < a for a, b in zip(values, values[1:])):
        raise ValueError(f"prune: thresholds must be non-decreasing (as lmplz requires), got {values}")
    values = [int(t) for t in values] + [int(values[-1])] * (order - len(values))
    return values if any(values) else None


def _kept_rows(o: _Orders, thresholds: list[int]) -> list[np.ndarray]:
    """Per order, the rows that survive pruning: raw count > threshold (every unigram), plus the context and the
    suffix of every kept n-gram (already true with non-decreasing thresholds on raw counts; enforced)."""
    N = len(o.ids)
    keep = [np.ones(len(o.ids[0]), bool)] + [o.counts[n - 1] > thresholds[n - 1] for n in range(2, N + 1)]
    for n in range(N, 2, -1):
        keep[n - 2][o.prefix[n - 1][keep[n - 1]]] = True
        keep[n - 2][o.suffix[n - 1][keep[n - 1]]] = True
    return keep


def _context_sums(o: _Orders, values: np.ndarray, n: int) -> np.ndarray:
    """Sum of ``values`` over the rows of order n grouped by their context (order n-1 rows)."""
    size = 1 if n == 1 else len(o.ids[n - 2])
    return np.bincount(o.prefix[n - 1], weights=values, minlength=size)


def _kneser_ney(words: list[str], o: _Orders, modified: bool, given: dict, on_progress=None,
                prune: list[int] | None = None) -> BackoffModel:
    N, V = len(o.ids), o.V
    adjusted = adjusted_counts(o)
    keep = _kept_rows(o, prune) if prune else None
    discounts, fallback, coc = [], [], []
    for n in range(1, N + 1):
        a = adjusted[n - 1]
        nk = count_of_counts(a[a > 0])
        coc.append(nk)
        if modified:
            d, fb = kenlm_discounts(nk)
        else:
            d1, fb = kn_discount(nk)
            d = (d1, d1, d1)
        if n in given:
            d, fb = tuple(given[n]), False
        discounts.append(tuple(float(x) for x in d))
        if fb:
            fallback.append(n)
    probs: list[np.ndarray] = []
    gammas: list[np.ndarray] = []  # per order n: gamma of each context row (order n-1; [0] for n=1)
    for n in range(1, N + 1):
        a = adjusted[n - 1].astype(np.float64)
        d1, d2, d3 = discounts[n - 1]
        disc = np.select([a == 0, a == 1, a == 2], [0.0, d1, d2], d3)
        denom = _context_sums(o, a, n)
        # the discounted mass, and with pruning the whole adjusted count of every pruned n-gram (lmplz's gamma)
        freed = disc * (a > 0) if keep is None else np.where(keep[n - 1], disc * (a > 0), a)
        mass = _context_sums(o, freed, n)
        with np.errstate(divide="ignore", invalid="ignore"):
            gamma = np.where(denom > 0, mass / denom, 0.0)
            uninterp = (a - disc) / denom[o.prefix[n - 1]]
        lower = np.full(len(a), 1.0 / (V - 1)) if n == 1 else probs[n - 2][o.suffix[n - 1]]
        probs.append(uninterp + gamma[o.prefix[n - 1]] * lower)
        gammas.append(gamma)
        if on_progress:
            on_progress(n, N)
    logprob = [_log10(p) for p in probs]
    logprob[0][BOS_ID] = 0.0  # never predicted; lmplz writes 0
    backoff = []
    for n in range(1, N + 1):
        if n == N:
            backoff.append(np.zeros(len(o.ids[n - 1])))
        else:
            g = gammas[n]  # contexts of order n+1 are rows of order n
            has_children = np.bincount(o.prefix[n], minlength=len(o.ids[n - 1])) > 0
            backoff.append(np.where(has_children, _log10(np.where(has_children, g, 1.0)), 0.0))
    info = {"discounts": {n + 1: list(d) for n, d in enumerate(discounts)}, "discount_fallback": fallback,
            "counts_of_adjusted_counts": {n + 1: c for n, c in enumerate(coc)}}
    method = "modified-kneser-ney" if modified else "kneser-ney"
    if keep is None:
        return BackoffModel(words, o.ids, logprob, backoff, method, info=info, trie=o.trie)
    info["prune"] = list(prune)
    info["pruned"] = {n + 1: int((~k).sum()) for n, k in enumerate(keep)}
    ids, trie = _pruned_trie(o, keep)
    return BackoffModel(words, ids, [lp[k] for lp, k in zip(logprob, keep)], [b[k] for b, k in zip(backoff, keep)],
                        method, info=info, trie=trie)


def _pruned_trie(o: _Orders, keep: list[np.ndarray]) -> tuple[list[np.ndarray], TrieIndex]:
    """The kept rows' ids and their trie: a kept row's context is kept, its new row is the number of kept rows
    before it, and renumbering is monotonic, so the keys stay sorted."""
    trie = TrieIndex(o.V)
    ids = [o.ids[0][keep[0]]]
    trie.keys = [o.trie.keys[0][keep[0]]]
    for n in range(2, len(o.ids) + 1):
        new_row = np.cumsum(keep[n - 2]) - 1
        kept = keep[n - 1]
        ids.append(o.ids[n - 1][kept])
        trie.keys.append(new_row[o.prefix[n - 1][kept]] * o.V + ids[-1][:, -1].astype(np.int64))
    return ids, trie


def _real_history_rows(o: _Orders, n: int) -> np.ndarray:
    """Rows of order n whose probability uses their full history (top order, or a sentence start)."""
    N = len(o.ids)
    if n == N:
        return np.ones(len(o.ids[n - 1]), bool)
    if n == 1:
        return np.zeros(len(o.ids[0]), bool)
    return o.ids[n - 1][:, 0] == BOS_ID


def _add_k(words: list[str], o: _Orders, k: float, vocab_size: int | None, method: str) -> BackoffModel:
    N, V = len(o.ids), o.V
    Vp = float(vocab_size if vocab_size is not None else V - 1)
    counts = [c.astype(np.float64) for c in o.counts]
    counts[0] = counts[0].copy()
    counts[0][BOS_ID] = 0.0
    uniform = -np.log10(Vp) if k > 0 else NEG_INF
    logprob, backoff = [], []
    for n in range(1, N + 1):
        c = counts[n - 1]
        denom = _context_sums(o, c, n)
        p = (c + k) / (denom[o.prefix[n - 1]] + k * Vp)
        real = _real_history_rows(o, n)
        lp = np.where(real, _log10(p), uniform)
        if n == 1:
            lp[BOS_ID] = 0.0
        logprob.append(lp)
    for n in range(1, N + 1):
        m = len(o.ids[n - 1])
        bo = np.zeros(m)
        if n < N:
            # a history in its own right: full length (N - 1), or a sentence start
            is_history = (o.ids[n - 1][:, 0] == BOS_ID) | (n == N - 1)
            total = np.bincount(o.prefix[n], weights=counts[n], minlength=m)
            unseen = _log10(k / (total + k * Vp)) if k > 0 else np.full(m, NEG_INF)
            bo = np.where(is_history, unseen - uniform if k > 0 else NEG_INF, 0.0)
        backoff.append(bo)
    info = {"k": k, "vocab_size": Vp}
    return BackoffModel(words, o.ids, logprob, backoff, method, info=info, trie=o.trie)


def _stupid_backoff(words: list[str], o: _Orders, alpha: float) -> BackoffModel:
    N = len(o.ids)
    logprob, backoff = [], []
    for n in range(1, N + 1):
        c = o.counts[n - 1].astype(np.float64)
        if n == 1:
            c = c.copy()
            c[BOS_ID] = 0.0
        denom = _context_sums(o, c, n)
        lp = _log10(c / denom[o.prefix[n - 1]])
        if n == 1:
            lp[BOS_ID] = 0.0
        logprob.append(lp)
        backoff.append(np.full(len(c), np.log10(alpha)) if n < N else np.zeros(len(c)))
    return BackoffModel(words, o.ids, logprob, backoff, "stupid-backoff", is_probability=False,
                        missing_context_backoff=float(np.log10(alpha)), info={"alpha": alpha}, trie=o.trie)


# ------------------------------------------------------------------------------------------ save / load
def save_model(model: BackoffModel, directory: str | Path) -> Path:
    """``model.npz`` (plain arrays, no pickle), ``words.json`` and ``model.json``."""
    import json

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for n in range(1, model.order + 1):
        arrays[f"ids_{n}"] = model.ids[n - 1]
        arrays[f"logprob_{n}"] = model.logprob[n - 1]
        arrays[f"backoff_{n}"] = model.backoff[n - 1]
        arrays[f"keys_{n}"] = model.trie.keys[n - 1]
    np.savez(directory / "model.npz", **arrays)
    (directory / "words.json").write_text(json.dumps(model.words, ensure_ascii=False), encoding="utf-8")
    meta = {"order": model.order, "method": model.method, "is_probability": model.is_probability,
            "missing_context_backoff": model.missing_context_backoff, "info": model.info}
    (directory / "model.json").write_text(json.dumps(meta, indent=2, default=str), encoding="utf-8")
    return directory


def load_model(directory: str | Path) -> BackoffModel:
    import json

    directory = Path(directory)
    meta = json.loads((directory / "model.json").read_text(encoding="utf-8"))
    words = json.loads((directory / "words.json").read_text(encoding="utf-8"))
    with np.load(directory / "model.npz", allow_pickle=False) as z:
        N = int(meta["order"])
        trie = TrieIndex(len(words))
        trie.keys = [z[f"keys_{n}"] for n in range(1, N + 1)]
        return BackoffModel(
            words, [z[f"ids_{n}"] for n in range(1, N + 1)], [z[f"logprob_{n}"] for n in range(1, N + 1)],
            [z[f"backoff_{n}"] for n in range(1, N + 1)], meta["method"], bool(meta["is_probability"]),
            float(meta["missing_context_backoff"]), meta.get("info", {}), trie=trie)
