"""models/retrieval.py: BM25 (bm25s) against a hand computation of Lucene's formula, its pickle-free save and load,
reciprocal rank fusion, chunking with offsets, the retrieval metrics, the Retriever's modes (dense and hybrid with a
stand-in encoder) and the one-line errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from corpusforge.models.retrieval import BM25Index, Retriever, chunk_passages, retrieval_metrics, rrf

PASSAGES = [
    "The Black Death was a bubonic plague pandemic in Europe.",
    "Nikola Tesla designed the alternating current induction motor.",
    "Warsaw is the capital and largest city of Poland.",
    "Oxygen is a chemical element with the symbol O.",
]


def test_bm25_ranks_the_passage_with_the_rare_query_words_first():
    index = BM25Index.build(PASSAGES)
    hits = index.search(["who designed the induction motors?", "plague in Europe", "capital of Poland"], top=3)
    assert [h[0][0] for h in hits] == [1, 0, 2]
    assert all(h[0][1] > 0 for h in hits)
    assert [s for _, s in hits[0]] == sorted((s for _, s in hits[0]), reverse=True)
    assert len(index.search(["the city"], top=100)[0]) == 1  # only the passage sharing a word; top capped at N


def test_a_query_without_an_indexed_word_gives_no_hits():
    index = BM25Index.build(PASSAGES)
    assert index.search(["xyzzy frobnicate", "", "the of and"], top=5) == [[], [], []]
    assert not index.scores("xyzzy").any()


def test_save_and_load_round_trip_without_pickle(tmp_path):
    index = BM25Index.build(PASSAGES, k1=1.2, b=0.6)
    queries = ["induction motor", "chemical symbol of oxygen", "capital city"]
    index.save(tmp_path / "ix")
    files = sorted(p.name for p in (tmp_path / "ix").iterdir())
    assert files and all(f.endswith((".npy", ".json")) for f in files), files
    for npy in (tmp_path / "ix").glob("*.npy"):
        np.load(npy, allow_pickle=False)  # raises if an array needed pickle
    again = BM25Index.load(tmp_path / "ix")
    assert again.search(queries, 4) == index.search(queries, 4)
    for q in queries:
        np.testing.assert_array_equal(again.scores(q), index.scores(q))
    assert again.settings["k1"] == 1.2 and again.settings["b"] == 0.6


def test_scores_match_lucene_bm25_by_hand():
    docs = ["apple banana apple", "banana cherry", "cherry cherry cherry date"]
    k1, b = 1.5, 0.75
    index = BM25Index.build(docs, k1=k1, b=b, stopwords=None, stemmer=False)
    tokens = [d.split() for d in docs]
    n, avgdl = len(docs), sum(map(len, tokens)) / len(docs)

    def by_hand(query: str) -> list[float]:
        out = []
        for words in tokens:
            score = 0.0
            for term in query.split():
                df = sum(term in t for t in tokens)
                tf = words.count(term)
                if df and tf:
                    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                    score += idf * tf / (tf + k1 * (1 - b + b * len(words) / avgdl))
            out.append(score)
        return out

    for query in ("apple", "banana cherry", "date apple", "cherry"):
        np.testing.assert_allclose(index.scores(query), by_hand(query), rtol=1e-6)
        expected = sorted(((i, s) for i, s in enumerate(by_hand(query)) if s > 0), key=lambda x: (-x[1], x[0]))
        got = index.search([query], 3)[0]
        assert [i for i, _ in got] == [i for i, _ in expected]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], rtol=1e-6)


def test_rrf_by_hand_and_weights_change_the_order():
    lexical = [(3, 9.0), (1, 5.0), (7, 1.0)]
    dense = [(1, 0.9), (5, 0.8), (3, 0.7)]
    fused = dict(rrf([lexical, dense], k=60, top=10))
    by_hand = {3: 1 / 61 + 1 / 63, 1: 1 / 62 + 1 / 61, 7: 1 / 63, 5: 1 / 62}
    assert fused.keys() == by_hand.keys()
    for item, score in by_hand.items():
        assert fused[item] == pytest.approx(score, rel=1e-12)
    assert [i for i, _ in rrf([lexical, dense], k=60, top=10)] == [1, 3, 5, 7]
    assert [i for i, _ in rrf([lexical, dense], k=60, top=2)] == [1, 3]
    heavy_lexical = rrf([lexical, dense], weights=[3.0, 1.0], k=60, top=10)
    assert [i for i, _ in heavy_lexical] == [3, 1, 7, 5]
    assert heavy_lexical[0][1] == pytest.approx(3 / 61 + 1 / 63)
    assert [i for i, _ in rrf([lexical, dense], weights=[0.0, 1.0])] == [1, 5, 3, 7]


def test_chunking_covers_every_word_with_the_overlap_and_offsets():
    texts = ["one two  three four five six seven eight nine ten eleven", "", "short text", "a\nb c d e f"]
    chunks = chunk_passages(texts, words=4, overlap=1)
    for i, start, end, text in chunks:
        assert texts[i][start:end] == text and len(text.split()) <= 4
    for t, text in enumerate(texts):
        mine = [c for c in chunks if c[0] == t]
        words = text.split()
        if not words:
            assert not mine
            continue
        for a, b in zip(mine, mine[1:]):  # each window starts 3 words after the previous: one word shared
            assert a[3].split()[-1:] == b[3].split()[:1] and a[1] < b[1] < a[2]
        # the first window, then each next one less its shared word: every word once, in order
        assert mine[0][3].split() + [w for c in mine[1:] for w in c[3].split()[1:]] == words
    first = [c[3] for c in chunks if c[0] == 0]
    assert first == ["one two  three four", "four five six seven", "seven eight nine ten", "ten eleven"]
    assert chunk_passages(texts) == [(i, 0, len(t), t) for i, t in enumerate(texts)]
    assert [c[3] for c in chunk_passages(["a b c d e"], words=2)] == ["a b", "c d", "e"]


def test_retrieval_metrics_by_hand():
    ranked = [[2, 0, 1], [1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5, 6], [9]]
    gold = [2, 6, {4, 5}, 3]
    m = retrieval_metrics(ranked, gold)
    assert m["questions"] == 4
    assert m["retrieval_top1"] == pytest.approx(1 / 4)
    assert m["retrieval_top5"] == pytest.approx(2 / 4)
    assert m["retrieval_mrr"] == pytest.approx((1 + 1 / 6 + 1 / 5 + 0) / 4)


class CharEncoder:
    """A stand-in sentence encoder: unit letter-count vectors (what the Retriever duck-types: encode(texts))."""

    def encode(self, texts):
        out = np.zeros((len(texts), 26), dtype=np.float32)
        for r, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z":
                    out[r, ord(ch) - 97] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_retriever_modes():
    encoder = CharEncoder()
    bm25 = Retriever(PASSAGES, mode="bm25")
    assert bm25.search(["Poland's capital"], 2)[0][0][0] == 2
    dense = Retriever(PASSAGES, mode="dense", embedder=encoder)
    vectors = encoder.encode(PASSAGES)
    hits = dense.search([PASSAGES[3]], 4)[0]
    assert hits[0][0] == 3 and hits[0][1] == pytest.approx(1.0, abs=1e-5) and len(hits) == 4
    expected = vectors @ encoder.encode([PASSAGES[3]])[0]
    np.testing.assert_allclose([s for _, s in hits], sorted(expected, reverse=True), rtol=1e-5)
    hybrid = Retriever(PASSAGES, mode="hybrid", embedder=encoder, vectors=vectors)
    lexical, cosine = bm25.search(["Tesla motor"], 100)[0], dense.search(["Tesla motor"], 100)[0]
    assert hybrid.search(["Tesla motor"], 3)[0] == rrf([lexical, cosine], k=60, top=3)
    assert hybrid.search(["Tesla motor"], 1)[0][0][0] == 1


@pytest.mark.parametrize("call, message", [
    (lambda: BM25Index.build([]), "non-empty list"),
    (lambda: BM25Index.build(["the of", ""]), "no passage has a word"),
    (lambda: BM25Index.build(["x y"], method="bm26"), "method"),
    (lambda: Retriever([], mode="bm25"), "non-empty list"),
    (lambda: Retriever(["a b"], mode="sparse"), "mode"),
    (lambda: Retriever(["a b"], mode="dense"), "needs an embedder"),
    (lambda: Retriever(["a b"], mode="hybrid"), "needs an embedder"),
    (lambda: rrf([[(1, 1.0)]], weights=[1.0, 2.0]), "one per ranking"),
    (lambda: chunk_passages(["a b"], words=2, overlap=2), "smaller than words"),
    (lambda: retrieval_metrics([[1]], [1, 2]), "one gold per ranking"),
])
def test_one_line_errors(call, message):
    with pytest.raises(ValueError) as raised:
        call()
    assert message in str(raised.value) and "\n" not in str(raised.value)
