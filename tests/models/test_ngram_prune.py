"""Pruned modified Kneser-Ney (lmplz's ``--prune``) without lmplz: a dict-based reference of lmplz's rules, and
the properties every pruned model must have (pruned n-grams absent, their contexts kept, each context's next-word
distribution summing to 1 with the backoff). tests/tasks/ngram/test_ngram_prune_kenlm.py compares with lmplz."""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np
import pytest

from corpusforge.models.ngram import (BOS, BOS_ID, EOS, count_sentences, estimate, load_model, prune_thresholds,
                                      save_model)
from corpusforge.models.ngram_arpa import read_arpa, write_arpa
from tests.models.test_ngram import CORPUS, naive_counts


def naive_pruned_mkn(sentences, order, thresholds):
    """lmplz's pruned modified Kneser-Ney, one n-gram at a time: an n-gram of order n >= 2 is dropped when its RAW
    count is <= thresholds[n-1]; discounts and denominators use every n-gram; a dropped n-gram's adjusted count
    joins its context's gamma. Returns the ARPA-style query p(word | ctx) and the kept n-grams per order."""
    thresholds = list(thresholds) + [thresholds[-1]] * (order - len(thresholds))
    raw, left, vocab = naive_counts(sentences, order)
    adj = [dict() for _ in range(order + 1)]
    for n in range(1, order + 1):
        for g, c in raw[n].items():
            adj[n][g] = c if n == order or g[0] == BOS else len(left[n][g])
    adj[1][(BOS,)] = 0
    adj[1].setdefault(("<unk>",), 0)
    kept = [set()] + [set(adj[1])] + [{g for g, c in raw[n].items() if c > thresholds[n - 1]}
                                      for n in range(2, order + 1)]
    disc = {}
    for n in range(1, order + 1):
        nk = [sum(1 for v in adj[n].values() if v == k) for k in (1, 2, 3, 4)]
        y = nk[0] / (nk[0] + 2 * nk[1])
        disc[n] = [0.0] + [k - (k + 1) * y * nk[k] / nk[k - 1] for k in (1, 2, 3)]
    total, freed = defaultdict(float), defaultdict(float)
    for n in range(1, order + 1):
        for g, a in adj[n].items():
            total[g[:-1]] += a
            if a > 0:
                freed[g[:-1]] += disc[n][min(a, 3)] if g in kept[n] else a
    V = len(vocab) - 1

    def p(word, ctx):
        if not ctx:
            a = adj[1].get((word,), 0)
            return (a - disc[1][min(a, 3)]) / total[()] + freed[()] / total[()] / V
        lower = p(word, ctx[1:])
        if total.get(ctx, 0) == 0 or ctx not in kept[len(ctx)]:
            return lower
        gamma = freed[ctx] / total[ctx]
        g = ctx + (word,)
        if g not in kept[len(g)]:
            return gamma * lower
        a = adj[len(g)][g]
        return (a - disc[len(g)][min(a, 3)]) / total[ctx] + gamma * lower

    return p, kept


def _model(order, prune, sentences=CORPUS):
    words, tables = count_sentences(sentences, order)
    return estimate(words, tables, "modified-kneser-ney", prune=prune), words, tables


@pytest.mark.parametrize("order,prune", [(3, [0, 0, 1]), (3, [0, 1, 2]), (4, [0, 1]), (4, [0, 0, 1, 3])])
def test_pruned_model_matches_naive_reference(order, prune):
    model, words, _ = _model(order, prune)
    p, kept = naive_pruned_mkn(CORPUS, order, prune)
    for n in range(1, order + 1):
        ours = {tuple(words[i] for i in row) for row in model.ids[n - 1].tolist()}
        assert ours == kept[n], n
    assert model.info["pruned"][order] > 0
    contexts = [(), ("w0",), ("w1",), ("w0", "w1"), ("w2", "w3"), (BOS,), (BOS, "w0"), ("w1", "w2", "w0"),
                ("w0", "w0", "w0"), ("w5", "w1", "w2")]
    for ctx in contexts:
        ctx = ctx[-(order - 1):] if order > 1 else ()
        for word in ["w0", "w1", "w2", "w3", "w7", "w40", EOS, "<unk>", "never-seen"]:
            assert model.log10_prob(word, ctx) == pytest.approx(np.log10(p(word if word != "never-seen" else "<unk>",
                                                                           tuple(ctx))), abs=1e-9), (ctx, word)


@pytest.mark.parametrize("order,prune", [(3, [0, 0, 1]), (4, [0, 1, 1, 2]), (3, [0, 2])])
def test_pruned_ngrams_absent_contexts_kept_distributions_sum_to_one(order, prune):
    model, words, tables = _model(order, prune)
    full = estimate(words, tables, "modified-kneser-ney")
    thresholds = prune_thresholds(prune, order)
    assert model.info["prune"] == thresholds and model.info["discounts"] == full.info["discounts"]
    for n in range(2, order + 1):
        ids, counts = tables[n - 1]
        rows = model.trie.index_of(ids)
        assert ((rows >= 0) == (counts > thresholds[n - 1])).all(), n  # pruned: exactly raw count <= threshold
        assert model.info["pruned"][n] == int((counts <= thresholds[n - 1]).sum())
        assert (model.info["pruned"][n] > 0) == (thresholds[n - 1] > 0)
        stored = model.ids[n - 1]
        assert (model.trie.index_of(stored[:, :-1]) >= 0).all()  # every kept n-gram's context is kept
        assert (model.trie.index_of(stored[:, 1:]) >= 0).all()  # and its suffix
    assert len(model.ids[0]) == len(words)  # unigrams are never pruned
    # every stored context (and the empty one): p(. | h) over the vocabulary without <s> sums to 1 with backoff
    contexts = [[]] + [row for n in range(1, order) for row in model.ids[n - 1][::7].tolist()]
    for ctx in contexts:
        dist = model._next_distribution(list(ctx))
        dist[BOS_ID] = -np.inf
        assert (10.0 ** dist).sum() == pytest.approx(1.0, abs=1e-9), ctx
    # a pruned top-order n-gram costs probability on the training text, the model is smaller
    assert model.evaluate(CORPUS)["perplexity"] > full.evaluate(CORPUS)["perplexity"]
    assert sum(len(i) for i in model.ids) < sum(len(i) for i in full.ids)


def test_no_pruning_is_the_unpruned_model():
    words, tables = count_sentences(CORPUS, 3)
    full = estimate(words, tables)
    for prune in (None, [], [0], [0, 0, 0]):
        same = estimate(words, tables, prune=prune)
        assert "prune" not in same.info
        for a, b in zip(same.logprob + same.backoff + same.ids, full.logprob + full.backoff + full.ids):
            assert np.array_equal(a, b)


def test_pruned_model_saves_loads_and_round_trips_through_arpa(tmp_path):
    model, _, _ = _model(3, [0, 1, 1])
    back = load_model(save_model(model, tmp_path / "m"))
    arpa = read_arpa(write_arpa(model, tmp_path / "m.arpa.gz"))
    assert [len(i) for i in arpa.ids] == [len(i) for i in model.ids]
    sents = CORPUS[:40] + [["w1", "zzz", "w0"], ["w3"]]
    for other in (back, arpa):
        assert other.evaluate(sents)["perplexity"] == pytest.approx(model.evaluate(sents)["perplexity"], rel=1e-6)
    assert back.info["prune"] == [0, 1, 1]


@pytest.mark.parametrize("prune,message", [
    ([0, 1, 2, 3], "4 thresholds for a model of order 3"),
    ([1, 1], "first (unigram) threshold must be 0"),
    ([0, 2, 1], "non-decreasing"),
    ([0, -1], "integers >= 0"),
])
def test_bad_thresholds_are_refused(prune, message):
    words, tables = count_sentences(CORPUS[:50], 3)
    with pytest.raises(ValueError, match=re.escape(message)):
        estimate(words, tables, prune=prune)
    with pytest.raises(ValueError, match="only kneser-ney and modified-kneser-ney"):
        estimate(words, tables, "add-k", prune=[0, 0, 1])
