"""Smoothing math on hand-computed tables (models/ngram.py).

Reference numbers come from the teaching-text example (issue 4), from hand arithmetic written out in
the comments, or from a deliberately naive dict-based re-implementation of Chen & Goodman / KenLM
written here (float64, one n-gram at a time), independent of the vectorized code under test.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np
import pytest

from corpusforge.models.ngram import (
    BOS,
    EOS,
    FALLBACK_DISCOUNTS,
    METHODS,
    _prepare,
    adjusted_counts,
    count_of_counts,
    count_sentences,
    estimate,
    kenlm_discounts,
    kn_discount,
    load_model,
    save_model,
)

TEACHING = ["the cat sat on the mat", "the cat ate the fish", "the dog sat on the mat"]
SENTS = [s.split() for s in TEACHING]


def prob(model, word, context):
    return 10 ** model.log10_prob(word, context.split())


def test_teaching_text_mle_bigrams():
    # issue 4: P(sat|cat) = 1/2, P(ate|cat) = 1/2, P(sat|dog) = 1/1
    words, tables = count_sentences(SENTS, 2)
    m = estimate(words, tables, "mle")
    assert prob(m, "sat", "cat") == pytest.approx(0.5)
    assert prob(m, "ate", "cat") == pytest.approx(0.5)
    assert prob(m, "sat", "dog") == pytest.approx(1.0)
    assert m.log10_prob("fish", ["cat"]) == -math.inf  # unseen under MLE: probability 0


def test_teaching_text_laplace_with_v6():
    # issue 4: add-one with V = 6: P(ran|cat) = (0+1)/(2+6) = 1/8, P(sat|cat) = (1+1)/(2+6) = 2/8
    words, tables = count_sentences(SENTS, 2)
    m = estimate(words, tables, "add-k", k=1.0, vocab_size=6)
    assert prob(m, "ran", "cat") == pytest.approx(1 / 8)
    assert prob(m, "sat", "cat") == pytest.approx(2 / 8)


def test_counts_of_teaching_text():
    words, tables = count_sentences(SENTS, 2)
    assert words[:3] == ["<unk>", BOS, EOS]
    bigrams = {tuple(words[i] for i in row): int(c) for row, c in zip(*tables[1])}
    assert bigrams[("the", "cat")] == 2 and bigrams[(BOS, "the")] == 3 and bigrams[("mat", EOS)] == 2
    # tokens + one </s> per sentence: 6+5+6 words + 3 + 3 <s> unigrams
    assert int(tables[0][1].sum()) == 17 + 3 + 3


def test_adjusted_counts_by_hand():
    words, tables = count_sentences(SENTS, 3)
    o = _prepare(words, tables)
    adj = adjusted_counts(o)
    idx = {w: i for i, w in enumerate(words)}

    def a(gram):
        ids = np.array([[idx[w] for w in gram.split()]])
        row = o.trie.index_of(ids)[0]
        return int(adj[len(gram.split()) - 1][row])

    assert a("sat") == 2  # left neighbours: cat, dog
    assert a("the") == 3  # <s>, on, ate
    assert a("</s>") == 2  # mat, fish
    assert a("<s>") == 0  # KenLM: the unigram <s> has count 0
    assert a("<s> the") == 3  # starts with <s>: raw count
    assert a("the cat") == 1  # only "<s> the cat" (twice) -> one distinct left word
    assert a("on the") == 1 and a("the mat") == 1
    assert a("the cat sat") == 1  # highest order: raw count


def test_kenlm_discounts_by_hand():
    # n = (3, 2, 1, 1): Y = 3/7; D1 = 1 - 2*Y*2/3 = 3/7; D2 = 2 - 3*Y*1/2 = 19/14; D3 = 3 - 4*Y*1/1 = 9/7
    d, fallback = kenlm_discounts([3, 2, 1, 1])
    assert not fallback
    assert d == pytest.approx((3 / 7, 19 / 14, 9 / 7))
    assert kenlm_discounts([3, 0, 1, 1]) == (FALLBACK_DISCOUNTS, True)  # a zero count-of-counts
    # n = (1, 1, 1, 10): Y = 1/3, D3 = 3 - 4 * (1/3) * 10 = -3.67 < 0: out of range
    assert kenlm_discounts([1, 1, 1, 10]) == (FALLBACK_DISCOUNTS, True)
    assert kn_discount([3, 2]) == (pytest.approx(3 / 7), False)
    assert count_of_counts(np.array([1, 1, 2, 5, 4, 4, 9])) == [2, 1, 0, 2]


# ------------------------------------------------------------------ naive reference implementation
def naive_counts(sentences, order):
    """(raw[n]: n-gram -> count, left[n]: n-gram -> distinct words seen to its left, vocabulary), one sentence
    at a time with <s> and </s>: what the naive references below start from."""
    raw = [Counter() for _ in range(order + 1)]
    vocab = {"<unk>", EOS, BOS}
    for s in sentences:
        seq = [BOS] + s + [EOS]
        vocab.update(s)
        for n in range(1, order + 1):
            for i in range(len(seq) - n + 1):
                raw[n][tuple(seq[i:i + n])] += 1
    left = [defaultdict(set) for _ in range(order + 1)]
    for n in range(2, order + 1):
        for h in raw[n]:
            left[n - 1][h[1:]].add(h[0])
    return raw, left, vocab


def naive_mkn(sentences, order, modified=True):
    """Dict-based interpolated (modified) Kneser-Ney following KenLM's rules, one n-gram at a time."""
    raw, left, vocab = naive_counts(sentences, order)
    adj = [dict() for _ in range(order + 1)]
    for n in range(1, order + 1):
        for g, c in raw[n].items():
            if n == order or g[0] == BOS:
                adj[n][g] = c
            else:
                adj[n][g] = len(left[n][g])
        if n == 1:
            adj[1][(BOS,)] = 0
            adj[1].setdefault(("<unk>",), 0)
    disc = {}
    for n in range(1, order + 1):
        nk = [sum(1 for v in adj[n].values() if v == k) for k in (1, 2, 3, 4)]
        if modified:
            y = nk[0] / (nk[0] + 2 * nk[1])
            disc[n] = [0.0] + [k - (k + 1) * y * nk[k] / nk[k - 1] for k in (1, 2, 3)]
            assert all(0 <= disc[n][k] <= k for k in (1, 2, 3))  # the corpus avoids the fallback
        else:
            y = nk[0] / (nk[0] + 2 * nk[1])
            disc[n] = [0.0, y, y, y]
    ctx_total, ctx_gamma = defaultdict(float), defaultdict(float)
    for n in range(1, order + 1):
        for g, a in adj[n].items():
            ctx_total[g[:-1]] += a
            if a > 0:
                ctx_gamma[g[:-1]] += disc[n][min(a, 3)]
    V = len(vocab) - 1  # without <s>

    def p(word, ctx):
        if not ctx:
            a = adj[1].get((word,), 0)
            return (a - disc[1][min(a, 3)]) / ctx_total[()] + ctx_gamma[()] / ctx_total[()] / V
        lower = p(word, ctx[1:])
        if ctx_total.get(ctx, 0) == 0:
            return lower
        a = adj[len(ctx) + 1].get(ctx + (word,), 0)
        return (a - disc[len(ctx) + 1][min(a, 3)]) / ctx_total[ctx] + ctx_gamma[ctx] / ctx_total[ctx] * lower

    return p, vocab


def zipf_corpus(n_sentences=300, vocab=200, seed=7):
    """Seeded Zipfian sentences, some repeated 2-4 times, so that every order up to 4 has n1..n4 > 0
    and in-range discounts (the naive reference asserts it)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    s = [[f"w{i}" for i in rng.choice(vocab, size=rng.integers(1, 14), p=p)] for _ in range(n_sentences)]
    return s + s[:40] + s[40:70] * 2 + s[70:90] * 3


CORPUS = zipf_corpus()


@pytest.mark.parametrize("method", ["modified-kneser-ney", "kneser-ney"])
@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_kneser_ney_matches_naive_reference(method, order):
    words, tables = count_sentences(CORPUS, order)
    model = estimate(words, tables, method)
    p, vocab = naive_mkn(CORPUS, order, modified=method == "modified-kneser-ney")
    assert model.info["discount_fallback"] == []
    contexts = [(), ("w0",), ("w1",), ("w0", "w1"), ("w2", "w3"), (BOS,), (BOS, "w0"), ("w1", "w2", "w0"),
                ("w5", "w0", "w0"), ("w99", "w98")]
    for ctx in contexts:
        ctx = ctx[-(order - 1):] if order > 1 else ()
        if BOS in ctx:
            ctx = ctx[ctx.index(BOS):]
        for w in sorted(vocab - {BOS}):
            assert 10 ** model.log10_prob(w, list(ctx)) == pytest.approx(p(w, tuple(ctx)), rel=1e-9), (ctx, w)


@pytest.mark.parametrize("method", ["modified-kneser-ney", "kneser-ney", "add-k"])
def test_distributions_sum_to_one(method):
    words, tables = count_sentences(CORPUS, 3)
    m = estimate(words, tables, method, k=0.5)
    for ctx in [[], ["w0"], ["w0", "w1"], ["zzz", "w0"], [BOS], [BOS, "w3"], ["q", "r"]]:
        dist = 10 ** m._next_distribution([m.word_index.get(w, 0) for w in ctx])
        dist[1] = 0.0  # <s> is never predicted
        assert dist.sum() == pytest.approx(1.0, abs=1e-12), ctx


def test_stupid_backoff_is_a_score_not_a_probability():
    words, tables = count_sentences(SENTS, 2)
    m = estimate(words, tables, "stupid-backoff", alpha=0.4)
    assert not m.is_probability
    # seen: c(cat sat)/c(cat) = 1/2; unseen "cat the": 0.4 * c(the)/N = 0.4 * 6/20 (20 = 17 words + 3 </s>)
    assert prob(m, "sat", "cat") == pytest.approx(0.5)
    assert prob(m, "the", "cat") == pytest.approx(0.4 * 6 / 20)
    # unseen context: still one backoff step
    assert prob(m, "the", "zebra") == pytest.approx(0.4 * 6 / 20)


def test_add_k_trigram_backoff_form_is_exact():
    # (c(hw) + k) / (c(h.) + kV), V = 8 words + </s> + <unk> = ... computed from the vocabulary below
    words, tables = count_sentences(SENTS, 3)
    m = estimate(words, tables, "add-k", k=0.5)
    V = len(words) - 1
    assert prob(m, "sat", "the cat") == pytest.approx((1 + 0.5) / (2 + 0.5 * V))
    assert prob(m, "mat", "the cat") == pytest.approx(0.5 / (2 + 0.5 * V))
    assert prob(m, "mat", "cat the") == pytest.approx(1 / V)  # unseen history: uniform
    assert prob(m, "the", "<s>") == pytest.approx((3 + 0.5) / (3 + 0.5 * V))  # sentence start


def test_sentence_score_and_perplexity_by_hand():
    # MLE bigram on the teaching text: "the cat sat on the mat" =
    # P(the|<s>)=3/3 * P(cat|the)=2/6 * P(sat|cat)=1/2 * P(on|sat)=2/2 * P(the|on)=2/2 * P(mat|the)=2/6 * P(</s>|mat)=2/2
    words, tables = count_sentences(SENTS, 2)
    m = estimate(words, tables, "mle")
    expected = math.log10(1 * (2 / 6) * (1 / 2) * 1 * 1 * (2 / 6) * 1)
    assert m.score_sentence("the cat sat on the mat".split()) == pytest.approx(expected)
    ev = m.evaluate([s.split() for s in ["the cat sat on the mat", "the mat"]])
    # "the mat": P(the|<s>)=1 * P(mat|the)=2/6 * P(</s>|mat)=1
    total = expected + math.log10(2 / 6)
    assert ev["perplexity"] == pytest.approx(10 ** (-total / 10))  # 7 + 3 scored tokens
    assert ev["oov"] == 0 and ev["sentences"] == 2


def test_oov_counted_and_excluded():
    words, tables = count_sentences(SENTS, 2)
    m = estimate(words, tables, "modified-kneser-ney") if False else estimate(words, tables, "add-k")
    ev = m.evaluate([["the", "zebra", "sat"]])
    assert ev["oov"] == 1 and ev["words"] == 3 and ev["tokens"] == 4
    logp = m.score_streams([m.encode(["the", "zebra", "sat"])[0]])
    assert ev["perplexity_without_oov"] == pytest.approx(10 ** (-(logp.sum() - logp[1]) / 3))
    assert m.log10_prob("zebra", ["the"]) == m.log10_prob("<unk>", ["the"])


def test_top_next_words():
    words, tables = count_sentences(SENTS, 2)
    m = estimate(words, tables, "mle")
    top = m.top_next(["the"], k=3)
    # P(cat|the) = P(mat|the) = 2/6, then dog and fish at 1/6; ties are broken by word id (smaller first)
    assert [w for w, _ in top] == ["cat", "mat", "dog"]
    ids = [int(m.encode([w])[0][0]) for w, _ in m.top_next(["the"], k=4)]
    assert ids[:2] == sorted(ids[:2]) and ids[2:] == sorted(ids[2:])
    assert 10 ** top[0][1] == pytest.approx(2 / 6) and 10 ** top[2][1] == pytest.approx(1 / 6)


def test_unseen_fractions():
    words, tables = count_sentences(SENTS, 2)
    m = estimate(words, tables, "mle")
    # "the cat sat": bigrams <s> the, the cat, cat sat, sat </s>: only "sat </s>" is unseen -> 1/4
    frac = m.unseen_fractions([m.encode("the cat sat".split())[0]])
    assert frac == {2: pytest.approx(0.25)}


@pytest.mark.parametrize("method", METHODS)
def test_save_load_round_trip(tmp_path, method):
    words, tables = count_sentences(CORPUS, 3)
    m = estimate(words, tables, method)
    back = load_model(save_model(m, tmp_path / "m"))
    sents = [m.encode(s)[0] for s in CORPUS[:5] + [["zz", "a", "b"]]]
    np.testing.assert_array_equal(m.score_streams(sents), back.score_streams(sents))
    assert back.method == method and back.is_probability == m.is_probability


def test_reserved_tokens_refused():
    with pytest.raises(ValueError, match="reserved"):
        count_sentences([["a", "</s>", "b"]], 2)


def contexts_by_search(words, tables):
    """Each n-gram's context row found by a plain dictionary (independent of the trie code)."""
    out = [np.zeros(0, dtype=np.int64)]
    for n in range(2, len(tables) + 1):
        if n == 2:
            out.append(tables[1][0][:, 0].astype(np.int64))
            continue
        row_of = {tuple(r): i for i, r in enumerate(tables[n - 2][0].tolist())}
        out.append(np.array([row_of[tuple(r[:-1])] for r in tables[n - 1][0].tolist()], dtype=np.int64))
    return out


@pytest.mark.parametrize("method", METHODS)
def test_given_contexts_give_the_same_model(method):
    """The counter's context rows spare the prefix searches; the estimate is identical to the last bit."""
    words, tables = count_sentences(CORPUS, 4)
    searched = estimate(words, tables, method)
    given = estimate(words, tables, method, contexts=contexts_by_search(words, tables))
    for n in range(4):
        assert np.array_equal(searched.ids[n], given.ids[n])
        assert np.array_equal(searched.logprob[n], given.logprob[n])
        assert np.array_equal(searched.backoff[n], given.backoff[n])


def test_wrong_contexts_are_refused():
    words, tables = count_sentences(CORPUS, 3)
    contexts = contexts_by_search(words, tables)
    shifted = [c.copy() for c in contexts]
    shifted[2][0] = (shifted[2][0] + 1) % len(tables[1][0])  # points at another bigram
    with pytest.raises(ValueError, match="does not hold"):
        estimate(words, tables, contexts=shifted)
    bigrams, counts = tables[1]
    backwards = (bigrams[::-1].copy(), counts[::-1].copy())  # each context right, the order wrong
    with pytest.raises(ValueError, match="lexicographic"):
        estimate(words, [tables[0], backwards], contexts=[contexts[0], backwards[0][:, 0].astype(np.int64)])
