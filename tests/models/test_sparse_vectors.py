"""corpusforge.models.sparse_vectors: TF/IDF variants against hand computation and scikit-learn (a reference tool)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from corpusforge.models.sparse_vectors import (bag_of_words, csr_from_triplets, idf_weights, normalize_rows, one_hot,
                                   select_vocabulary, tf_weights, tfidf)


def counts_matrix(docs: list[list[str]], vocab: list[str]):
    index = {w: i for i, w in enumerate(vocab)}
    return bag_of_words([[index[w] for w in d] for d in docs], len(vocab))


def test_teaching_text_coffee_and_tea():
    # Teaching text: "I love coffee." / "I love tea." -> I and love get 0, coffee/tea positive in their own doc.
    vocab = ["i", "love", "coffee", "tea"]
    docs = [["i", "love", "coffee"], ["i", "love", "tea"]]
    counts = counts_matrix(docs, vocab)
    df = np.array([2, 2, 1, 1])
    for base, log in (("e", math.log), ("10", math.log10), ("2", math.log2)):
        m = tfidf(counts, np.array([3, 3]), idf_weights(df, 2, "log", base), tf="relative").toarray()
        expected = np.zeros((2, 4))
        expected[0, 2] = expected[1, 3] = (1 / 3) * log(2 / 1)  # TF = 1/3, IDF = log(N/df) = log 2
        np.testing.assert_allclose(m, expected, rtol=1e-12)
    # the printed table says 0.1: that is the log10 version, (1/3) * log10(2) = 0.1003
    m10 = tfidf(counts, np.array([3, 3]), idf_weights(df, 2, "log", "10")).toarray()
    assert round(m10[0, 2], 1) == 0.1


def test_bag_of_words_teaching_example():
    # "We learn NLP. For NLP we need to learn BoW." -> [we, learn, nlp, for, need, to, bow] = [2, 2, 2, 1, 1, 1, 1]
    vocab = ["we", "learn", "nlp", "for", "need", "to", "bow"]
    doc = "we learn nlp for nlp we need to learn bow".split()
    assert counts_matrix([doc], vocab).toarray().tolist() == [[2, 2, 2, 1, 1, 1, 1]]


def test_one_hot_rows_sum_to_bag_of_words():
    ids = [3, 0, 3, 1]
    oh = one_hot(ids, 5).toarray()
    assert oh.shape == (4, 5) and (oh.sum(axis=1) == 1).all()
    assert oh[0].tolist() == [0, 0, 0, 1, 0]
    np.testing.assert_array_equal(oh.sum(axis=0), bag_of_words([ids], 5).toarray()[0])
    with pytest.raises(ValueError):
        one_hot([5], 5)


@pytest.mark.parametrize("sublinear", [False, True])
def test_smooth_idf_l2_matches_scikit_learn(sublinear):
    sk = pytest.importorskip("sklearn.feature_extraction.text")
    texts = ["the cat sat on the mat", "the dog sat", "a cat and a dog and a cat", "mat mat mat"]
    ref = sk.TfidfVectorizer(smooth_idf=True, sublinear_tf=sublinear, norm="l2", token_pattern=r"\S+")
    expected = ref.fit_transform(texts).toarray()
    vocab = list(ref.get_feature_names_out())
    counts = counts_matrix([t.split() for t in texts], vocab)
    df = np.asarray((counts > 0).sum(axis=0)).ravel()
    idf = idf_weights(df, len(texts), "smooth")
    np.testing.assert_allclose(idf, ref.idf_, rtol=1e-12)
    ours = tfidf(counts, np.array([len(t.split()) for t in texts]), idf, tf="log" if sublinear else "raw", norm="l2")
    np.testing.assert_allclose(ours.toarray(), expected, rtol=1e-10, atol=1e-12)


def test_tf_variants_by_hand():
    counts = csr_from_triplets(np.array([0, 0, 1]), np.array([0, 1, 1]), np.array([3.0, 1.0, 2.0]), (2, 2))
    lengths = np.array([5, 2])  # doc 0 had 5 tokens (one outside the vocabulary)
    np.testing.assert_allclose(tf_weights(counts, lengths, "relative").toarray(), [[3 / 5, 1 / 5], [0, 1.0]])
    np.testing.assert_allclose(tf_weights(counts, lengths, "raw").toarray(), [[3, 1], [0, 2]])
    np.testing.assert_allclose(tf_weights(counts, lengths, "binary").toarray(), [[1, 1], [0, 1]])
    np.testing.assert_allclose(tf_weights(counts, lengths, "log").toarray(),
                               [[1 + math.log(3), 1.0], [0, 1 + math.log(2)]])
    np.testing.assert_allclose(normalize_rows(counts, "l1").toarray(), [[0.75, 0.25], [0, 1]])


def test_idf_none_and_errors():
    np.testing.assert_array_equal(idf_weights(np.array([1, 4]), 4, "none"), [1.0, 1.0])
    with pytest.raises(ValueError, match="df >= 1"):
        idf_weights(np.array([0, 1]), 3, "log")


def test_select_vocabulary_min_df_max_df_max_features():
    df = np.array([1, 5, 3, 10, 2])  # 10 documents
    assert select_vocabulary(df, 10).tolist() == [0, 1, 2, 3, 4]
    assert select_vocabulary(df, 10, min_df=2).tolist() == [1, 2, 3, 4]
    assert select_vocabulary(df, 10, min_df=2, max_df=0.5).tolist() == [1, 2, 4]  # df 10 > 0.5 * 10
    assert select_vocabulary(df, 10, max_features=2).tolist() == [1, 3]  # the two highest df, in term order
