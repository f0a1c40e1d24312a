"""corpusforge.models.glove: the weighting, the loss, one AdaGrad step by hand, determinism and convergence."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from corpusforge.models.glove import (
    GloVe,
    GloveParams,
    fit_glove,
    glove_loss,
    glove_step,
    glove_weight,
    stable_batch_size,
)


def test_weighting_function_by_hand():
    x = torch.tensor([0.0, 1.0, 50.0, 100.0, 250.0])
    expected = [0.0, (1 / 100) ** 0.75, 0.5 ** 0.75, 1.0, 1.0]  # f(x) = (x/x_max)^(3/4), capped at 1
    np.testing.assert_allclose(glove_weight(x).numpy(), expected, rtol=1e-6)


def test_loss_and_two_adagrad_steps_match_the_reference_update_by_hand():
    model = GloVe(3, 2, torch.Generator().manual_seed(3))
    w, c = model.w.detach().double().numpy().copy(), model.c.detach().double().numpy().copy()
    bw, bc = model.bw.detach().double().numpy().copy(), model.bc.detach().double().numpy().copy()
    i, j, x = torch.tensor([0]), torch.tensor([2]), torch.tensor([7.0])
    f, lr = (7 / 100) ** 0.75, 0.05
    diff = w[0] @ c[2] + bw[0] + bc[2] - math.log(7)
    assert float(glove_loss(model, i, j, torch.log(x), glove_weight(x))) == pytest.approx(0.5 * f * diff**2, rel=1e-5)
    acc: dict = {}
    cost = glove_step(model, acc, i, j, torch.log(x), glove_weight(x), lr)
    assert float(cost) == pytest.approx(0.5 * f * diff**2, rel=1e-5)
    # glove.c: g = lr * f * diff * c_j; w_i -= g / sqrt(gradsq_i) with gradsq starting at 1; then gradsq += g^2
    g_w, g_c, g_b = lr * f * diff * c[2], lr * f * diff * w[0], lr * f * diff
    w1, c1 = w[0] - g_w, c[2] - g_c
    np.testing.assert_allclose(model.w.detach().numpy()[0], w1, rtol=1e-5)
    np.testing.assert_allclose(model.c.detach().numpy()[2], c1, rtol=1e-5)
    assert float(model.bc[2]) == pytest.approx(bc[2] - g_b, rel=1e-5)
    np.testing.assert_allclose(model.w.detach().numpy()[1], w[1])  # untouched rows do not move
    # second step: the accumulator now holds 1 + g^2 from the first one
    diff2 = w1 @ c1 + (bw[0] - g_b) + (bc[2] - g_b) - math.log(7)
    glove_step(model, acc, i, j, torch.log(x), glove_weight(x), lr)
    g2 = lr * f * diff2 * c1
    np.testing.assert_allclose(model.w.detach().numpy()[0], w1 - g2 / np.sqrt(1 + g_w**2), rtol=1e-4)


def low_rank_cooccurrence(n=30, seed=0):
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(n, 3)) * 0.7
    logx = u @ u.T + 3.0
    rows, cols = np.nonzero(rng.random((n, n)) < 0.7)
    return rows, cols, np.exp(logx[rows, cols])


def test_fit_is_deterministic_and_reduces_the_loss():
    rows, cols, x = low_rank_cooccurrence()
    params = GloveParams(dim=8, epochs=30, batch_size=64, seed=5, learning_rate=0.1)
    emb1, hist1 = fit_glove(rows, cols, x, 30, params, device="cpu")
    emb2, hist2 = fit_glove(rows, cols, x, 30, params, device="cpu")
    np.testing.assert_array_equal(emb1, emb2)
    assert emb1.shape == (30, 8)
    assert hist1[-1]["loss"] < 0.2 * hist1[0]["loss"]
    other, _ = fit_glove(rows, cols, x, 30, GloveParams(dim=8, epochs=1, batch_size=64, seed=6), device="cpu")
    assert not np.allclose(other, emb1)


def test_embedding_is_word_plus_context():
    gen = torch.Generator().manual_seed(0)
    model = GloVe(4, 3, gen)
    np.testing.assert_allclose(model.embeddings(), (model.w + model.c).detach().numpy())


def test_bad_params_and_empty_input():
    with pytest.raises(ValueError, match="dim"):
        GloveParams(dim=0)
    with pytest.raises(ValueError, match="no co-occurrences"):
        fit_glove(np.array([], dtype=int), np.array([], dtype=int), np.array([]), 3, GloveParams(dim=2, epochs=1))


def three_topic_cooccurrence(n=60, seed=0):
    """A small-corpus-like matrix: counts 0.1-5 (no entry near the paper's x_max of 100), three topics.

    log X_ij = 1 within a topic, -1.5 across (plus noise), so the right embedding puts same-topic words
    together (cosine near 1) and different topics apart (cosine < 0)."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 3
    logx = np.where(labels[:, None] == labels[None, :], 1.0, -1.5) + rng.normal(scale=0.2, size=(n, n))
    rows, cols = np.nonzero(~np.eye(n, dtype=bool))
    return rows, cols, np.exp(logx[rows, cols]), labels


def topic_cosines(emb, labels):
    u = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    sims = u @ u.T
    same = labels[:, None] == labels[None, :]
    return float(sims[same & ~np.eye(len(labels), dtype=bool)].mean()), float(sims[~same].mean())


def test_default_x_max_fits_small_counts_where_the_papers_100_underfits():
    # Regression test for the PTB underfit (benchmarks/RESULTS.md, embeddings): with x_max 100 every weight
    # f(x) here is <= (5/100)^0.75 = 0.106, so 15 epochs barely leave the near-zero initialisation.
    assert GloveParams().x_max == 10.0
    rows, cols, x, labels = three_topic_cooccurrence()
    emb, _ = fit_glove(rows, cols, x, 60, GloveParams(dim=8, epochs=15, batch_size=256, seed=1), device="cpu")
    same, cross = topic_cosines(emb, labels)
    assert same > 0.9 and cross < -0.3  # measured 0.996 / -0.489 (seeds 1-5: >= 0.994 / <= -0.46)
    emb100, _ = fit_glove(rows, cols, x, 60, GloveParams(dim=8, epochs=15, batch_size=256, seed=1, x_max=100.0),
                          device="cpu")
    assert topic_cosines(emb100, labels)[0] < 0.5  # measured 0.15 (seeds 1-5: 0.14-0.26)


def test_summed_minibatch_steps_do_not_overshoot_frequent_rows():
    # Every row appears in 59 entries of each epoch; with the whole matrix in one batch each row gets 59
    # summed stale steps at once. glove.c applies them one at a time (batch 1); both must fit alike.
    rows, cols, x, labels = three_topic_cooccurrence()
    results = []
    for batch_size in (16, len(x)):
        emb, hist = fit_glove(rows, cols, x, 60, GloveParams(dim=8, epochs=15, batch_size=batch_size, seed=2),
                              device="cpu")
        assert np.isfinite(emb).all() and hist[-1]["loss"] < hist[0]["loss"]
        results.append(topic_cosines(emb, labels))
    (same16, cross16), (same_all, cross_all) = results
    assert same16 > 0.95 and same_all > 0.95  # measured 0.997 and 0.995
    assert abs(cross16 - cross_all) < 0.05  # measured -0.497 vs -0.494


def dense_large_counts(n=60, seed=0):
    """Every pair of n words co-occurs 20-1,100 times (f = 1 everywhere): few, dense, heavy rows, the shape of a
    small corpus's co-occurrence matrix (2,000 lines of PTB: 1,314 words, the top row in 1.2% of the entries)."""
    rng = np.random.default_rng(seed)
    rows, cols = np.nonzero(~np.eye(n, dtype=bool))
    logx = rng.uniform(3.0, 7.0, size=(n, n))
    logx = (logx + logx.T) / 2
    return rows, cols, np.exp(logx[rows, cols])


def test_default_batch_is_capped_where_a_frequent_rows_summed_step_would_overshoot():
    # Regression test for issue 35 (defect 3): with the default 32,768-entry batch the whole matrix was one step,
    # each row summing 59 stale steps of weight 1 (lr * F = 2.95 > 1): the loss went 12.8 -> 1.7e28 in 5 epochs
    # (NaN vectors at n = 150; all-NaN vectors on 2,000 lines of PTB).
    rows, cols, x = dense_large_counts()
    assert GloveParams().batch_size == 32768 > len(x)
    emb, hist = fit_glove(rows, cols, x, 60, GloveParams(dim=10, epochs=5, seed=1), device="cpu")
    assert np.isfinite(emb).all()
    losses = [h["loss"] for h in hist]
    assert all(b < a for a, b in itertools.pairwise(losses)) and losses[-1] < 0.5  # measured 9.56 -> 0.294
    # the cap: nnz / (lr * the heaviest row's summed f) = 3540 / (0.05 * 59)
    assert hist[0]["batch_size"] == 1200
    w = glove_weight(torch.as_tensor(x, dtype=torch.float32), 10.0)
    i, j = torch.as_tensor(rows), torch.as_tensor(cols)
    assert stable_batch_size(i, j, w, 60, 0.05, 32768) == 1200
    assert stable_batch_size(i, j, w, 60, 0.05, 512) == 512  # a smaller batch than the cap is kept
    assert stable_batch_size(i, j, w, 60, 1e6, 32768) == 64  # never below 64 entries


def test_small_weights_are_not_capped():
    # counts 0.1-5 (f <= 0.6): the heaviest row's summed weight times lr stays under 1 even in one batch of all
    # entries, so the batch asked for is the batch used (and results on such matrices do not change)
    rows, cols, x, _labels = three_topic_cooccurrence()
    _, hist = fit_glove(rows, cols, x, 60, GloveParams(dim=8, epochs=1, batch_size=len(x), seed=2), device="cpu")
    assert hist[0]["batch_size"] == len(x)
