"""Sentence-BERT's parts: the in-batch contrastive loss and the retrieval scores against hand computations, and a
siamese encoder that learns which sentences belong together (before training it finds them by chance)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from corpusforge.models.configs import TrainConfig
from corpusforge.models.objectives import in_batch_loss, retrieval_scores
from corpusforge.models.objectives.contrastive import contrastive
from corpusforge.models.sbert.config import SBertConfig
from corpusforge.models.training import train
from corpusforge.models.zoo import build_model, load_weights

PAD, CLS, SEP = 0, 1, 2
V = 40


def test_the_in_batch_loss_is_the_cross_entropy_against_the_diagonal():
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    b = torch.tensor([[3.0, 0.0], [1.0, 1.0]])
    # cosines: row 0 -> (1, 1/sqrt2), row 1 -> (0, 1/sqrt2); scale 2
    s = 1 / math.sqrt(2)
    rows = [(-math.log(math.exp(2) / (math.exp(2) + math.exp(2 * s)))),
            (-math.log(math.exp(2 * s) / (math.exp(0) + math.exp(2 * s))))]
    assert in_batch_loss(a, b, 2.0, symmetric=False).item() == pytest.approx(sum(rows) / 2)
    cols = [(-math.log(math.exp(2) / (math.exp(2) + math.exp(0)))),
            (-math.log(math.exp(2 * s) / (math.exp(2 * s) + math.exp(2 * s))))]
    assert in_batch_loss(a, b, 2.0).item() == pytest.approx((sum(rows) / 2 + sum(cols) / 2) / 2)


def test_retrieval_scores_count_ranks_and_ties_against_the_partner():
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    b = torch.tensor([[1.0, 0.1], [1.0, 0.0], [1.0, 1.0]])
    # row 0: own 0.995 but b1 scores 1.0 -> rank 2; row 1: own 0 (b0 0.0995, b2 0.707 higher) -> rank 3; row 2: rank 1
    s = retrieval_scores(a, b)
    assert s["top1"] == pytest.approx(1 / 3) and s["top5"] == 1.0 and s["mrr"] == pytest.approx((1 / 2 + 1 / 3 + 1) / 3)


def shifted_pairs(n: int, seed: int) -> tuple[list[list[int]], list[list[int]]]:
    """(a sentence of 3..7 word ids, the same words each one id up): which sentence is whose partner is learnable."""
    rng = np.random.default_rng(seed)
    firsts, seconds = [], []
    for _ in range(n):
        words = [int(t) for t in rng.integers(3, V - 1, rng.integers(3, 8))]
        firsts.append([CLS, *words, SEP])
        seconds.append([CLS, *[w + 1 for w in words], SEP])
    return firsts, seconds


@pytest.mark.learns
def test_a_siamese_encoder_learns_which_sentences_belong_together():
    cfg = SBertConfig(vocab_size=V, block_size=16, n_layer=2, n_head=2, n_embd=32, cls_id=CLS, sep_id=SEP, pad_id=PAD,
                      dropout=0.0)
    torch.manual_seed(0)
    model = build_model("sbert", cfg)
    assert model.prepare([5, 6]) == [CLS, 5, 6, SEP]
    obj = contrastive(cfg, {"train": shifted_pairs(2000, 1), "valid": shifted_pairs(200, 2)})
    before = obj.evaluate(model, "valid", 32)
    result = train(model, obj, TrainConfig(max_iters=300, batch_size=32, lr=2e-3, min_lr=2e-4, warmup_iters=10,
                                           eval_interval=300, eval_iters=0, weight_decay=0.0, device="cpu",
                                           log_interval=1000))
    assert before["top1"] < 0.3 and result.metrics["val_top1"] >= 0.9, (before, result.metrics)


def test_it_starts_from_a_pretrained_bert_by_name():
    from corpusforge.models.bert.config import BertConfig

    torch.manual_seed(0)
    bert = build_model("bert", BertConfig(vocab_size=V, block_size=16, n_layer=2, n_head=2, n_embd=32, mask_id=3,
                                          cls_id=CLS, sep_id=SEP, pad_id=PAD, eot_id=4))
    encoder = build_model("sbert", SBertConfig(vocab_size=V, block_size=16, n_layer=2, n_head=2, n_embd=32,
                                               cls_id=CLS, sep_id=SEP, pad_id=PAD, pooling="cls"))
    report = load_weights(encoder, bert.state_dict())
    assert not report["missing"] and "nsp_head.weight" in report["unexpected"]
    ids = torch.tensor([[CLS, 7, 8, SEP, PAD]])
    mask = ids != PAD
    bert.eval(), encoder.eval()
    torch.testing.assert_close(encoder(ids, mask), bert.encode(ids, None, mask)[0][:, 0])
