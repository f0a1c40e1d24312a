"""Attention functions, positional encoding and the LM loss on the teaching texts' worked examples.

Every expected number is computed here, independently, in float64 (numpy or math), from the examples'
*inputs*: several printed results in the texts contain arithmetic slips (e.g. the K matrix and the
softmax of the "Deep Learning Models" example, the softmax of the "the cat sat" example).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from corpusforge.models.attention import (
    additive_attention,
    causal_mask,
    dot_attention,
    scaled_dot_product_attention,
    sinusoidal_positions,
)
from corpusforge.models.objectives import loss_metrics


def np_softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def t64(a) -> torch.Tensor:
    return torch.tensor(np.asarray(a, dtype=np.float64))


# 004_*: "the cat sat", d_k = 2 (Q, K, V given directly)
Q_CAT = np.array([[1, 0], [0, 1], [1, 1]], dtype=np.float64)
K_CAT = np.array([[0, 1], [1, 0], [1, 1]], dtype=np.float64)
V_CAT = np.array([[1, 0], [0, 1], [0.5, 0.5]], dtype=np.float64)

# 000_*: "Deep Learning Models": X + P projected by W^Q, W^K, W^V
X_DLM = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0]], dtype=np.float64)
P_DLM = np.array([[0, 1, 0], [0.5, 0.5, 0.5], [1, 0, 1]], dtype=np.float64)
WQ = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0]], dtype=np.float64)
WK = np.array([[1, 1, 0], [0, 1, 1], [1, 0, 1]], dtype=np.float64)
WV = np.array([[1, 0, 2], [0, 2, 1], [1, 1, 1]], dtype=np.float64)


def test_scaled_dot_product_on_the_cat_sat_example():
    out, w = scaled_dot_product_attention(t64(Q_CAT), t64(K_CAT), t64(V_CAT))
    # closed form for row 0: scores (0, 1/sqrt2, 1/sqrt2) -> weights (1, e, e)/(1 + 2e) with e = exp(1/sqrt2)
    e = math.exp(1 / math.sqrt(2))
    assert w[0].tolist() == pytest.approx([1 / (1 + 2 * e), e / (1 + 2 * e), e / (1 + 2 * e)], abs=1e-12)
    assert w[0, 0].item() == pytest.approx(0.19777, abs=1e-5)  # the text prints 0.244: a slip
    expected_w = np_softmax(Q_CAT @ K_CAT.T / math.sqrt(2))
    np.testing.assert_allclose(w.numpy(), expected_w, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), expected_w @ V_CAT, atol=1e-12)
    np.testing.assert_allclose(w.sum(-1).numpy(), 1.0, atol=1e-12)


def test_dot_and_scaled_attention_on_deep_learning_models_example():
    Xp = X_DLM + P_DLM
    np.testing.assert_allclose(Xp, [[1, 1, 1], [0.5, 1.5, 1.5], [2, 1, 1]])  # the text's X' (correct)
    Q, K, V = Xp @ WQ, Xp @ WK, Xp @ WV
    assert K[1].tolist() == [2, 2, 3] and K[2].tolist() == [3, 3, 2]  # the text prints [2,3,3], [3,3,3]
    # Luong dot attention: softmax(Q K^T) V, as the text's step 7 applies it (no scaling)
    out, w = dot_attention(t64(Q), t64(K), t64(V))
    expected = np_softmax(Q @ K.T)
    np.testing.assert_allclose(w.numpy(), expected, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), expected @ V, atol=1e-12)
    assert w.argmax(-1).tolist() == [2, 2, 2]  # every token attends most to "Models" (this part holds)
    # Vaswani: divide by sqrt(d_k) = sqrt(3)
    out_s, w_s = scaled_dot_product_attention(t64(Q), t64(K), t64(V))
    expected_s = np_softmax(Q @ K.T / math.sqrt(3))
    np.testing.assert_allclose(w_s.numpy(), expected_s, atol=1e-12)
    np.testing.assert_allclose(out_s.numpy(), expected_s @ V, atol=1e-12)


def test_additive_attention_matches_loop_over_keys():
    # Bahdanau: e_j = v_a^T tanh(W_a q + U_a h_j); query = the decoder state, keys = values = encoder states
    Xp = X_DLM + P_DLM
    q = Xp[0]
    H = Xp @ WK
    W_a = np.array([[0.1, -0.2, 0.3], [0.0, 0.2, -0.1]])
    U_a = np.array([[-0.2, 0.1, 0.0], [0.1, 0.3, -0.2]])
    v_a = np.array([0.5, -1.0])
    energies = np.array([v_a @ np.tanh(W_a @ q + U_a @ h) for h in H])
    alpha = np_softmax(energies)
    context = sum(a * h for a, h in zip(alpha, H))
    out, w = additive_attention(t64(q[None]), t64(H), t64(H), t64(W_a), t64(U_a), t64(v_a))
    np.testing.assert_allclose(w[0].numpy(), alpha, atol=1e-12)
    np.testing.assert_allclose(out[0].numpy(), context, atol=1e-12)


@pytest.mark.parametrize("fn", [dot_attention, scaled_dot_product_attention])
def test_mask_zeroes_masked_keys(fn):
    Q, K, V = t64(Q_CAT), t64(K_CAT), t64(V_CAT)
    out, w = fn(Q, K, V, mask=causal_mask(3))
    assert w[0].tolist() == [1.0, 0.0, 0.0]  # the first query sees only itself
    assert torch.all(w.triu(1) == 0)
    # row 1 renormalises over keys 0..1 only
    scale = 1 / math.sqrt(2) if fn is scaled_dot_product_attention else 1.0
    s = Q_CAT[1] @ K_CAT[:2].T * scale
    np.testing.assert_allclose(w[1, :2].numpy(), np_softmax(s), atol=1e-12)


def test_additive_attention_mask():
    q, H = t64(np.ones((1, 2))), t64(K_CAT)
    W, v = t64(np.eye(2)), t64(np.ones(2))
    _, w = additive_attention(q, H, H, W, W, v, mask=torch.tensor([[True, False, True]]))
    assert w[0, 1].item() == 0.0 and w[0].sum().item() == pytest.approx(1.0)


def test_fully_masked_query_gives_zero_weights_not_nan():
    _, w = dot_attention(t64(Q_CAT), t64(K_CAT), t64(V_CAT), mask=torch.zeros(3, 3, dtype=torch.bool))
    assert not torch.isnan(w).any() and torch.all(w == 0)


def test_sinusoidal_pe_d4_positions_0_and_1():
    pe = sinusoidal_positions(2, 4).double()
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    # the PE_1 = [0.8415, 0.5403, 0.0100, 1.0000] = [sin 1, cos 1, sin 0.01, cos 0.01]
    expected = [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]
    np.testing.assert_allclose(pe[1].numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(pe[1].numpy(), [0.8415, 0.5403, 0.0100, 1.0000], atol=5e-5)


def test_cross_entropy_on_three_probabilities():
    # "the cat sat": P = 0.10, 0.05, 0.30 -> L = -(ln .1 + ln .05 + ln .3)
    p = [0.10, 0.05, 0.30]
    total = -math.fsum(math.log(x) for x in p)
    assert total == pytest.approx(6.5023, abs=5e-5)
    # the same through F.cross_entropy on logits whose softmax puts p on the target
    probs = torch.tensor([[0.10, 0.45, 0.45], [0.95, 0.05, 0.0], [0.35, 0.35, 0.30]], dtype=torch.float64)
    logits = torch.log(probs.clamp_min(1e-300))
    loss = F.cross_entropy(logits, torch.tensor([0, 1, 2]), reduction="sum").item()
    assert loss == pytest.approx(total, abs=1e-12)
    m = {f"val_{k}": v for k, v in loss_metrics(total / 3).items()}
    assert m["val_ppl"] == pytest.approx((0.10 * 0.05 * 0.30) ** (-1 / 3), rel=1e-12)  # geometric mean of 1/p
    assert m["val_bpt"] == pytest.approx(-math.fsum(math.log2(x) for x in p) / 3, rel=1e-12)
