"""BERT token classification (models/bert_tagger): each word's tag is read at its first sub-word, the other
sub-words carry no label, words past the block are not read (and carry no label in the objective), and the model
learns a tag that only the word's first piece shows."""

from __future__ import annotations

import torch

from corpusforge.models.bert_tagger.config import BertTaggerConfig
from corpusforge.models.bert_tagger.model import BertTagger
from corpusforge.models.objectives.base import IGNORE
from corpusforge.models.objectives.tagging import Tagging

CFG = BertTaggerConfig(vocab_size=20, n_layer=1, n_head=2, n_embd=16, block_size=8, dropout=0.0, cls_id=1,
                       sep_id=2, pad_id=0, n_tags=3, classifier_dropout=0.0)


def test_collate_points_each_word_at_its_first_sub_word():
    model = BertTagger(CFG)
    ids, token_mask, first, word_mask = model.collate([[[5, 6], [7], [8, 9, 10]], [[11]]])
    assert ids[0].tolist() == [1, 5, 6, 7, 8, 9, 10, 2] and first[0].tolist() == [1, 3, 4]
    assert ids[1].tolist()[:3] == [1, 11, 2] and token_mask[1].tolist() == [True] * 3 + [False] * 5
    assert word_mask.tolist() == [[True, True, True], [True, False, False]]
    # past the block (8 positions with [CLS] and [SEP]): the third word is not read; a first word longer than the
    # block keeps its first pieces, so every sentence reads at least one word
    _, _, first, word_mask = model.collate([[[5, 6, 7], [8, 9], [10, 11]], [[3] * 20]])
    assert first[0].tolist() == [1, 4] and word_mask.tolist() == [[True, True], [True, False]]
    assert model(*model.collate([[[5], [6, 7]]])).shape == (1, 2, 3)


def test_the_objective_gives_unread_words_no_label():
    model = BertTagger(CFG)
    sentences = [[[5, 6, 7], [8, 9], [10, 11]], [[5], [6], [7]]]
    objective = Tagging({"train": (sentences, [[0, 1, 2], [0, 1, 2]])})
    *inputs, tags = objective._collate(model, "train", [0, 1])
    # the first sentence's third word was not read (past the block): its tag is not trained on
    assert tags.tolist() == [[0, 1, IGNORE], [0, 1, 2]]


def test_it_learns_a_tag_only_the_first_piece_shows():
    torch.manual_seed(0)
    model = BertTagger(CFG)
    # tag 0 when the word starts with piece 5, 1 when with 6, 2 when with 7; the second pieces are noise
    gen = torch.Generator().manual_seed(0)
    sentences, tags = [], []
    for _ in range(64):
        words = [[int(torch.randint(5, 8, (1,), generator=gen)), int(torch.randint(10, 20, (1,), generator=gen))]
                 for _ in range(2)]
        sentences.append(words)
        tags.append([w[0] - 5 for w in words])
    objective = Tagging({"train": (sentences, tags)})
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(60):
        *inputs, gold = objective._collate(model, "train", list(range(64)))
        loss, n = model.tag_loss(model(*inputs), gold, inputs[-1])
        opt.zero_grad()
        (loss / n).backward()
        opt.step()
    *inputs, gold = objective._collate(model, "train", list(range(64)))
    model.eval()
    assert model.decode(model(*inputs), inputs[-1]) == tags
