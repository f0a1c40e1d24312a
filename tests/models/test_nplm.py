"""Bengio's NPLM on the teaching text's toy example, and its fixed-window causality."""

from __future__ import annotations

import math

import pytest
import torch

from corpusforge.models.nplm.config import NPLMConfig
from corpusforge.models.nplm.model import NPLM


def test_hidden_layer_on_the_cat_sat_mat_example():
    # 004_*: C = [[.2,.8],[.5,.1],[.9,.3]], H = [[.3,-.1],[.4,.2]], d = 0, context "cat" (id 0), bigram
    model = NPLM(NPLMConfig(vocab_size=3, context=1, n_embd=2, n_hidden=2, direct=False)).double()
    with torch.no_grad():
        model.C.weight[:3] = torch.tensor([[0.2, 0.8], [0.5, 0.1], [0.9, 0.3]], dtype=torch.float64)
        model.H.weight.copy_(torch.tensor([[0.3, -0.1], [0.4, 0.2]], dtype=torch.float64))
        model.H.bias.zero_()
        # U passes h through to the first two logits, so the logits show the hidden layer
        model.U.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
        model.U.bias.zero_()
    logits, _ = model(torch.tensor([[0]]))
    h = [math.tanh(0.3 * 0.2 - 0.1 * 0.8), math.tanh(0.4 * 0.2 + 0.2 * 0.8)]  # tanh(-0.02), tanh(0.24)
    assert logits[0, 0].tolist() == pytest.approx([*h, 0.0], abs=1e-12)
    assert h[1] == pytest.approx(0.2355, abs=1e-4)


def test_each_position_sees_exactly_its_window():
    torch.manual_seed(0)
    model = NPLM(NPLMConfig(vocab_size=10, context=3, n_embd=4, n_hidden=5, block_size=8, pad_id=9)).eval()
    idx = torch.randint(0, 10, (1, 8))
    base, _ = model(idx)
    changed = idx.clone()
    changed[0, 2] = (changed[0, 2] + 1) % 10
    logits, _ = model(changed)
    # token 2 is in the windows of positions 2, 3, 4 only
    assert torch.equal(logits[0, :2], base[0, :2]) and torch.equal(logits[0, 5:], base[0, 5:])
    assert not torch.allclose(logits[0, 2:5], base[0, 2:5])
    # position 0 sees [pad, pad, idx0]: the tokenizer's pad id (or its end-of-text id), not an id of its own
    assert model.contexts(idx)[0, 0].tolist() == [9, 9, idx[0, 0].item()]
    assert model.C.weight.shape[0] == 10
