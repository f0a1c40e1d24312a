"""BERT extractive QA (models/bert_reader): [CLS] question [SEP] passage [SEP] with segment ids, padding scored -inf,
the span loss (start and end cross-entropy, averaged, per window), the span objective's checks, n-best decoding
(end after start, at most max_answer_len tokens, inside the passage), and a reader that learns to point at the token
the question names."""

from __future__ import annotations

import math

import pytest
import torch

from corpusforge.models.bert_reader.config import BertReaderConfig
from corpusforge.models.bert_reader.model import BertReader
from corpusforge.models.objectives.span import SpanExtraction
from corpusforge.tasks.qa.inference import best_spans

CFG = BertReaderConfig(vocab_size=24, n_layer=1, n_head=2, n_embd=32, block_size=16, dropout=0.0, cls_id=1,
                       sep_id=2, pad_id=0, classifier_dropout=0.0)


def test_pair_and_collate_build_the_bert_input():
    model = BertReader(CFG)
    ids, seg = model.pair([5, 6], [7, 8, 9])
    assert ids == [1, 5, 6, 2, 7, 8, 9, 2] and seg == [0, 0, 0, 0, 1, 1, 1, 1]
    x, s, mask = model.collate([(ids, seg), model.pair([5], [7])])
    assert x.shape == (2, 8) and x[1].tolist() == [1, 5, 2, 7, 2, 0, 0, 0]
    assert s[1].tolist() == [0, 0, 0, 1, 1, 0, 0, 0] and mask[1].tolist() == [True] * 5 + [False] * 3
    start, end = model(x, s, mask)
    assert start.shape == end.shape == (2, 8)
    assert torch.isinf(start[1, 5:]).all() and torch.isfinite(start[1, :5]).all()  # padding is never an answer
    with pytest.raises(ValueError, match="longer than the model's block_size 16"):
        model.collate([model.pair([5] * 10, [7] * 10)])


def test_span_loss_is_the_mean_of_the_start_and_end_cross_entropies():
    start = torch.tensor([[0.0, 1.0, 2.0]])
    end = torch.tensor([[2.0, 0.0, 0.0]])
    expected = (-(torch.log_softmax(start, -1)[0, 2]) - torch.log_softmax(end, -1)[0, 1]) / 2
    got = BertReader.span_loss(start, end, torch.tensor([2]), torch.tensor([1]))
    assert math.isclose(float(got), float(expected), rel_tol=1e-6)


def test_the_objective_refuses_a_span_outside_its_window():
    with pytest.raises(ValueError, match="train window 0: start 3 and end 9"):
        SpanExtraction({"train": [([1, 5, 2, 7, 2], [0, 0, 0, 1, 1], 3, 9)]})
    with pytest.raises(ValueError, match="no question window"):
        SpanExtraction({"train": [], "valid": [([1, 2], [0, 0], 0, 0)]})


def test_best_spans_pairs_the_n_best_starts_and_ends():
    # passage tokens at positions 3..7; the best start is at 7 but no end follows it, so the next valid pair wins
    start = [9.0, 9.0, 9.0, 1.0, 0.0, 4.0, 0.0, 5.0]
    end = [9.0, 9.0, 9.0, 0.0, 0.0, 0.0, 3.0, 0.0]
    spans = best_spans(start, end, first=3, length=5, n_best=5, max_answer_len=30)
    assert spans[0] == (7.0, 2, 3)  # positions 5..6 as passage tokens 2..3 (score 4 + 3)
    assert all(j >= i for _, i, j in spans)
    assert all(j - i < 1 for _, i, j in best_spans(start, end, 3, 5, 5, max_answer_len=1))
    # the [CLS] and question positions (0..2) are never answers, however high they score
    assert all(i >= 0 and j < 5 for _, i, j in spans)
    assert best_spans(start, end, 3, 0, 5, 30) == []


@pytest.mark.learns
def test_it_learns_to_point_at_the_token_the_question_names():
    """Each question is one token q in 5..9; the passage holds a shuffle of 10..19 and the answer is the token
    q + 5 (start = end). Only the pairing of question and passage tells where: the reader must read both."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = BertReader(CFG)
    windows = []
    for _ in range(96):
        q = int(torch.randint(5, 10, (1,), generator=gen))
        passage = (torch.randperm(10, generator=gen) + 10).tolist()[:8]
        if q + 5 not in passage:
            passage[int(torch.randint(8, (1,), generator=gen))] = q + 5
        ids, seg = model.pair([q], passage)
        at = 3 + passage.index(q + 5)
        windows.append((ids, seg, at, at))
    objective = SpanExtraction({"train": windows[:80], "valid": windows[80:]})
    before = objective.evaluate(model, "valid", 16)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_module = objective.loss_module(model)
    for step in range(400):
        *tensors, = objective._collate(model, "train", list(range(step % 5 * 16, step % 5 * 16 + 16)))
        loss, _ = loss_module(*tensors)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = objective.evaluate(model, "valid", 16)
    assert after["loss"] < before["loss"] - 1.0
    assert after["span_accuracy"] >= 0.75, after  # chance is 1/8 of the passage positions
