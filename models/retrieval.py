"""Passage retrieval (issue 48, item 2): BM25 lexical search with the ``bm25s`` library beside the dense sentence
encoder's cosine search, and a hybrid of the two by reciprocal rank fusion; the chunking that turns paragraphs into
passages and the top-1 / top-5 / MRR figures a retrieval run is read by.

- :class:`BM25Index`: ``bm25s`` (sparse, precomputed per-term scores; Lucene's BM25 by default) over passages
  tokenized by ``bm25s.tokenize`` (lowercase, ``\\w\\w+`` words, English stop words, PyStemmer's English Snowball
  stemmer). Saved without pickle: bm25s's own ``save`` writes its arrays with ``np.save(allow_pickle=False)`` and
  its vocabulary and parameters as JSON (checked in bm25s 0.3.16's source); our settings go beside them as JSON,
  and loading passes ``allow_pickle=False`` too.
- :class:`Retriever`: ``bm25``, ``dense`` (an encoder's unit vectors, exact dot-product top-k) or ``hybrid``
  (:func:`rrf` over the top ``depth`` of both).
- :func:`rrf`: weighted reciprocal rank fusion (Cormack, Clarke, Buettcher 2009): score = sum_i w_i / (k + rank_i).
- :func:`chunk_passages`: fixed windows of whitespace words with an overlap, each mapped back to its text and
  character offsets, so a hit points at its paragraph.
- :func:`retrieval_metrics`: top-1, top-5 and MRR of ranked lists against gold passages.

No torch here: the dense side takes any object with ``encode(list[str]) -> (N, d) unit rows`` (duck-typed: the
sentence_embeddings stage's ``SentenceEmbedder`` is one), so this module imports nothing of corpusforge.tasks.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")  # bm25s's BM25 variants
MODES = ("bm25", "dense", "hybrid")
SETTINGS = "retrieval.json"  # our settings beside bm25s's files in a saved index
FORMAT = 1

Hits = list[tuple[int, float]]


def _bm25s():
    """The bm25s module, its logger quietened: importing it sets that logger to DEBUG, which prints a line per index
    built ("Building index from IDs objects") through Prefect's task log."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


def _stemmer(on: bool):
    if not on:
        return None
    import Stemmer

    return Stemmer.Stemmer("english")


class BM25Index:
    """A BM25 index over passages (rows 0..N-1): ``search(queries, top)`` gives each query's (row, score) best
    first, among the passages that share at least one (stemmed, non-stop) word with it."""

    def __init__(self, model, settings: dict[str, Any]):
        self.model, self.settings = model, settings
        self._stem = _stemmer(bool(settings["stemmer"]))

    def __len__(self) -> int:
        return int(self.model.scores["num_docs"])

    @classmethod
    def build(cls, passages: Sequence[str], k1: float = 1.5, b: float = 0.75, method: str = "lucene",
              stopwords: str | list[str] | None = "en", stemmer: bool = True) -> BM25Index:
        """Index ``passages`` with bm25s (``method``: one of METHODS; ``stopwords``: a bm25s language code such as
        "en", a list of words, or None for none; ``stemmer``: PyStemmer's English stemmer)."""
        bm25s = _bm25s()

        if isinstance(passages, str) or not len(passages):
            raise ValueError("passages: give a non-empty list of strings to index")
        if method not in METHODS:
            raise ValueError(f"method: {method!r} is not one of {', '.join(METHODS)}")
        if not k1 >= 0 or not 0 <= b <= 1:
            raise ValueError(f"k1={k1}, b={b}: BM25 needs k1 >= 0 and 0 <= b <= 1")
        settings = {"format": FORMAT, "k1": float(k1), "b": float(b), "method": method,
                    "stopwords": list(stopwords) if isinstance(stopwords, (list, tuple)) else stopwords,
                    "stemmer": bool(stemmer), "passages": len(passages), "bm25s": bm25s.__version__}
        index = cls(None, settings)
        tokens = bm25s.tokenize([str(p) for p in passages], stopwords=index._stopwords(), stemmer=index._stem,
                                return_ids=True, show_progress=False)
        if not tokens.vocab:
            raise ValueError("passages: no passage has a word to index (all are empty or stop words only)")
        model = bm25s.BM25(k1=k1, b=b, method=method)
        model.index(tokens, create_empty_token=False, show_progress=False)
        index.model = model
        return index

    def _stopwords(self):
        given = self.settings["stopwords"]
        return [] if given in (None, False, "") else given

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """The words of each text as the index sees them (lowercased, stop words out, stemmed)."""
        bm25s = _bm25s()

        return bm25s.tokenize([str(t) for t in texts], stopwords=self._stopwords(), stemmer=self._stem,
                              return_ids=False, show_progress=False)

    def _ids(self, words: list[str]) -> list[int]:
        vocab = self.model.vocab_dict
        return [vocab[w] for w in words if w and w in vocab]

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every passage for ``query`` (N,), float32; zeros when no word of it is indexed."""
        ids = self._ids(self.tokenize([query])[0])
        if not ids:
            return np.zeros(len(self), dtype=np.float32)
        return np.asarray(self.model.get_scores_from_ids(ids), dtype=np.float32)

    def search(self, queries: Sequence[str], top: int = 10) -> list[Hits]:
        """Per query, up to ``top`` (row, score) pairs, best first (ties by row), among the passages containing at
        least one of its indexed words; an empty list for a query none of whose words is indexed."""
        if isinstance(queries, str):
            raise ValueError("queries: give a list of strings (one query: [query])")
        top = min(int(top), len(self))
        if top < 1:
            raise ValueError(f"top: {top}: ask for at least one passage")
        indptr, rows = self.model.scores["indptr"], self.model.scores["indices"]
        out = []
        for words in self.tokenize(queries):
            ids = self._ids(words)
            if not ids:
                out.append([])
                continue
            scores = np.asarray(self.model.get_scores_from_ids(ids), dtype=np.float32)
            matched = np.unique(np.concatenate([rows[indptr[t]:indptr[t + 1]] for t in set(ids)])).astype(np.int64)
            out.append(_best(matched, scores[matched], top))
        return out

    def save(self, directory: str | Path) -> Path:
        """Write the index into ``directory`` (bm25s's .npy arrays and JSON, plus retrieval.json): no pickle."""
        directory = Path(directory)
        self.model.save(directory, corpus=None, allow_pickle=False, show_progress=False)
        (directory / SETTINGS).write_text(json.dumps(self.settings, indent=1) + "\n", encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory: str | Path, mmap: bool = False) -> BM25Index:
        """An index written by :meth:`save` (arrays read with ``allow_pickle=False``; ``mmap``: memory-mapped)."""
        bm25s = _bm25s()

        directory = Path(directory)
        path = directory / SETTINGS
        if not path.is_file():
            raise ValueError(f"{directory}: no {SETTINGS}; not a BM25 index written by BM25Index.save")
        settings = json.loads(path.read_text(encoding="utf-8"))
        if settings.get("format") != FORMAT:
            raise ValueError(f"{path}: format {settings.get('format')!r}, expected {FORMAT}; rebuild the index")
        model = bm25s.BM25.load(directory, allow_pickle=False, mmap=mmap, load_corpus=False, show_progress=False)
        index = cls(model, settings)
        if len(index) != settings["passages"]:
            raise ValueError(f"{directory}: {len(index)} passages indexed, {settings['passages']} recorded; "
                             "rebuild the index")
        return index


def _best(rows: np.ndarray, scores: np.ndarray, top: int) -> Hits:
    """The ``top`` (row, score) pairs with the highest scores, best first, ties by row: exact and deterministic."""
    if len(rows) > top:
        kth = np.partition(scores, len(scores) - top)[len(scores) - top]
        keep = scores >= kth  # every row tied with the last one kept, so the tie-break by row is exact
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((rows, -scores))[:top]
    return [(int(rows[i]), float(scores[i])) for i in order]


def top_dot(vectors, queries, top: int) -> list[Hits]:
    """Per row of ``queries`` (Q, d), the (row, dot product) of the ``top`` rows of ``vectors`` (N, d; an array or
    a memory map) with the largest dot product, best first, ties by row: exact, in blocks of 64 MB of vectors (the
    sentence_embeddings stage's ``top_cosines`` calls this one)."""
    vectors_n = len(vectors)
    queries = np.asarray(queries, dtype=np.float32).reshape(-1, vectors.shape[1])
    top = min(int(top), vectors_n)
    best_rows = np.zeros((len(queries), 0), dtype=np.int64)
    best_scores = np.zeros((len(queries), 0), dtype=np.float32)
    block = max(1, (1 << 26) // max(1, vectors.shape[1] * 4))
    for start in range(0, vectors_n, block):
        chunk = np.asarray(vectors[start:start + block], dtype=np.float32)
        scores = np.concatenate([best_scores, (chunk @ queries.T).T], axis=1)
        rows = np.concatenate([best_rows, np.broadcast_to(np.arange(start, start + len(chunk)),
                                                          (len(queries), len(chunk)))], axis=1)
        if scores.shape[1] > top:
            keep = np.argpartition(-scores, top - 1, axis=1)[:, :top]
            scores, rows = np.take_along_axis(scores, keep, 1), np.take_along_axis(rows, keep, 1)
        best_scores, best_rows = scores, rows
    out = []
    for s, r in zip(best_scores, best_rows):
        order = np.lexsort((r, -s))
        out.append([(int(r[i]), float(s[i])) for i in order])
    return out


def rrf(rankings: Sequence[Hits], weights: Sequence[float] | None = None, k: int = 60, top: int = 10) -> Hits:
    """Weighted reciprocal rank fusion (Cormack et al. 2009): each id scores sum_i w_i / (k + rank_i) over the
    rankings it appears in (rank from 1; the rankings' own scores are not used); the ``top`` ids, best first, ties
    by id. An id repeated within one ranking counts at its first place."""
    weights = [1.0] * len(rankings) if weights is None else [float(w) for w in weights]
    if len(weights) != len(rankings):
        raise ValueError(f"weights: {len(weights)} given for {len(rankings)} rankings; give one per ranking")
    if any(not w >= 0 for w in weights):
        raise ValueError(f"weights: {weights}: each must be >= 0")
    if not k >= 0:
        raise ValueError(f"k: {k}: the rank constant must be >= 0 (60 in Cormack et al.)")
    fused: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights):
        seen: set[int] = set()
        for rank, (item, _score) in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            fused[int(item)] = fused.get(int(item), 0.0) + weight / (k + rank)
    return sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:max(0, int(top))]


def chunk_passages(texts: Sequence[str], words: int = 0, overlap: int = 0) -> list[tuple[int, int, int, str]]:
    """Passages cut from ``texts``: (text index, char start, char end, chunk text), with chunk text ==
    texts[i][start:end]. ``words`` 0: each text is one passage (row i is text i). Else windows of ``words``
    whitespace-separated words, each starting ``words - overlap`` words after the previous one, the last one
    reaching the text's last word (a text with no word gives no passage)."""
    if isinstance(texts, str):
        raise ValueError("texts: give a list of strings (one text: [text])")
    if words < 0 or overlap < 0:
        raise ValueError(f"words={words}, overlap={overlap}: both must be >= 0")
    if words == 0:
        if overlap:
            raise ValueError(f"overlap={overlap} needs words > 0 (the chunk size)")
        return [(i, 0, len(t), t) for i, t in enumerate(texts)]
    if overlap >= words:
        raise ValueError(f"overlap={overlap}: must be smaller than words={words}")
    out = []
    step = words - overlap
    for i, text in enumerate(texts):
        spans = [m.span() for m in re.finditer(r"\S+", text)]
        start = 0
        while start < len(spans):
            last = min(start + words, len(spans)) - 1
            a, b = spans[start][0], spans[last][1]
            out.append((i, a, b, text[a:b]))
            if last == len(spans) - 1:
                break
            start += step
    return out


def retrieval_metrics(ranked: Sequence[Sequence[int]], gold: Sequence[int | set[int]]) -> dict[str, float | int]:
    """Top-1, top-5 and MRR (fractions 0-1) of ``ranked`` (per question, passage ids best first) against ``gold``
    (per question, the right passage id, or a set of ids any of which is right); MRR over the whole returned
    ranking, 0 for a question whose gold is absent from it."""
    if len(ranked) != len(gold):
        raise ValueError(f"ranked has {len(ranked)} questions, gold {len(gold)}: give one gold per ranking")
    if not len(ranked):
        raise ValueError("no questions to score")
    top1 = top5 = mrr = 0.0
    for ids, right in zip(ranked, gold):
        right = {right} if isinstance(right, (int, np.integer)) else set(right)
        place = next((r for r, i in enumerate(ids, start=1) if i in right), None)
        if place is not None:
            top1 += place == 1
            top5 += place <= 5
            mrr += 1.0 / place
    n = len(ranked)
    return {"retrieval_top1": top1 / n, "retrieval_top5": top5 / n, "retrieval_mrr": mrr / n, "questions": n}


class Retriever:
    """Passages searched by ``mode``: ``bm25`` (a :class:`BM25Index`, built here unless given), ``dense`` (unit
    ``vectors`` of the passages, encoded here by ``embedder`` unless given; queries by ``embedder.encode``) or
    ``hybrid`` (:func:`rrf` of both sides' top ``depth``, weights (w_bm25, w_dense), constant ``rrf_k``)."""

    def __init__(self, passages: Sequence[str], mode: str = "bm25", embedder=None, bm25: BM25Index | None = None,
                 vectors=None, weights: Sequence[float] = (1.0, 1.0), rrf_k: int = 60, depth: int = 100):
        if isinstance(passages, str) or not len(passages):
            raise ValueError("passages: give a non-empty list of strings to search")
        if mode not in MODES:
            raise ValueError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
        if mode != "bm25" and embedder is None:
            raise ValueError(f"mode {mode!r} needs an embedder (a sentence encoder with encode(texts)); "
                             "or use mode 'bm25'")
        if len(weights) != 2:
            raise ValueError(f"weights: {tuple(weights)}: give two, (w_bm25, w_dense)")
        if depth < 1:
            raise ValueError(f"depth: {depth}: fuse at least the top 1 of each side")
        self.passages, self.mode, self.embedder = list(passages), mode, embedder
        self.weights, self.rrf_k, self.depth = tuple(float(w) for w in weights), rrf_k, int(depth)
        self.bm25 = self.vectors = None
        if mode in ("bm25", "hybrid"):
            self.bm25 = bm25 if bm25 is not None else BM25Index.build(self.passages)
            if len(self.bm25) != len(self.passages):
                raise ValueError(f"bm25: indexes {len(self.bm25)} passages, {len(self.passages)} given; "
                                 "build it from these passages")
        if mode in ("dense", "hybrid"):
            self.vectors = vectors if vectors is not None else embedder.encode(self.passages)
            if len(self.vectors) != len(self.passages):
                raise ValueError(f"vectors: {len(self.vectors)} rows for {len(self.passages)} passages; "
                                 "encode these passages")

    def _dense(self, queries: Sequence[str], top: int) -> list[Hits]:
        if not len(queries):
            return []
        return top_dot(self.vectors, self.embedder.encode(list(queries)), top)

    def search(self, queries: Sequence[str], top: int = 10) -> list[Hits]:
        """Per query, up to ``top`` (passage row, score) pairs, best first: the BM25 score, the cosine, or the
        fused RRF score by mode."""
        if isinstance(queries, str):
            raise ValueError("queries: give a list of strings (one query: [query])")
        if top < 1:
            raise ValueError(f"top: {top}: ask for at least one passage")
        if self.mode == "bm25":
            return self.bm25.search(queries, top)
        if self.mode == "dense":
            return self._dense(queries, top)
        depth = max(self.depth, top)
        lexical, dense = self.bm25.search(queries, depth), self._dense(queries, depth)
        return [rrf([a, b], self.weights, self.rrf_k, top) for a, b in zip(lexical, dense)]
