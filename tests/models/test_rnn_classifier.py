"""The many-to-one recurrent classifier: ``last`` is the forward direction's state after the last real token joined
to the backward direction's after the first (checked against the LSTM run on the unpadded text), padding changes no
logit, and a BiLSTM learns a task that only word order decides."""

from __future__ import annotations

import pytest
import torch

from corpusforge.models.configs import TrainConfig
from corpusforge.models.objectives.classification import classification
from corpusforge.models.rnn_classifier.config import RNNClassifierConfig
from corpusforge.models.training import train
from corpusforge.models.zoo import build_model
from tests.models.test_bert import toy_labelled

V, PAD = 60, 0


def cfg(**kw) -> RNNClassifierConfig:
    return RNNClassifierConfig(**{**dict(vocab_size=V, pad_id=PAD, n_embd=16, n_hidden=24, dropout=0.0), **kw})


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_last_is_both_directions_final_states_and_padding_changes_nothing(cell):
    torch.manual_seed(0)
    model = build_model("rnn_classifier", cfg(cell=cell, n_layer=2)).eval()
    ids = torch.tensor([[5, 9, 13, 17, 21]])
    features = model.features(ids, torch.ones_like(ids, dtype=torch.bool))
    out, _ = model.rnn(model.wte(ids))  # the whole unpadded text, both directions: (1, T, 2H)
    H = model.cfg.n_hidden
    torch.testing.assert_close(features[0, :H], out[0, -1, :H])  # forward: after the last token
    torch.testing.assert_close(features[0, H:], out[0, 0, H:])  # backward: after the first token
    padded = torch.cat([ids, torch.full((1, 4), PAD)], dim=1)
    mask = padded != PAD
    batch = torch.cat([padded, torch.tensor([[7, 8, 9, 10, 11, 12, 13, 14, 15]])])
    batch_mask = torch.cat([mask, torch.ones(1, 9, dtype=torch.bool)])
    torch.testing.assert_close(model(batch, batch_mask)[:1], model(ids, torch.ones_like(ids, dtype=torch.bool)))


@pytest.mark.parametrize("pooling", ["max", "mean"])
def test_pooled_outputs_ignore_padding(pooling):
    torch.manual_seed(0)
    model = build_model("rnn_classifier", cfg(pooling=pooling)).eval()
    ids = torch.tensor([[5, 9, 13]])
    padded = torch.tensor([[5, 9, 13, PAD, PAD]])
    torch.testing.assert_close(model(padded, padded != PAD), model(ids, torch.ones_like(ids, dtype=torch.bool)))


@pytest.mark.learns
def test_a_bilstm_learns_what_word_order_decides():
    c = cfg(n_embd=32, n_hidden=48)
    torch.manual_seed(0)
    model = build_model("rnn_classifier", c)
    x, y = toy_labelled(1500, 1)
    vx, vy = toy_labelled(300, 2)
    obj = classification(c, {"train": ([model.prepare(s) for s in x], y), "valid": ([model.prepare(s) for s in vx], vy)})
    result = train(model, obj, TrainConfig(max_iters=300, batch_size=32, lr=5e-3, min_lr=5e-4, warmup_iters=10,
                                           eval_interval=300, eval_iters=0, weight_decay=0.0, device="cpu",
                                           log_interval=1000))
    assert result.metrics["val_accuracy"] >= 0.95, result.metrics
