"""A many-to-one recurrent classifier in one readable file: embedding -> dropout -> (Bi)LSTM/GRU over the real
tokens (padding is never read: corpusforge.models.recurrent) -> one vector per text -> dropout -> linear layer over the classes.

The vector is, with ``pooling: last``, the top layer's final hidden state, the forward direction's after the last
token joined to the backward direction's after the first (what a bidirectional RNN knows of the whole text from
both ends); ``max`` and ``mean`` pool the top layer's outputs over the real tokens (corpusforge.models.pooling).
``HEAD`` names the task head (``classify.finetune: head`` trains only it: a linear probe on fixed features).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from corpusforge.models.pooling import pool
from corpusforge.models.recurrent import run_padded
from corpusforge.models.rnn_classifier.config import RNNClassifierConfig


class RNNClassifier(nn.Module):
    HEAD = ("classifier.",)

    def __init__(self, cfg: RNNClassifierConfig):
        super().__init__()
        if cfg.pad_id is None:
            raise ValueError("pad_id: a classifier pads its batches with the tokenizer's pad token (tokenizer.roles.pad)")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd, padding_idx=cfg.pad_id)
        rnn = nn.LSTM if cfg.cell == "lstm" else nn.GRU
        self.rnn = rnn(cfg.n_embd, cfg.n_hidden, num_layers=cfg.n_layer, batch_first=True,
                       bidirectional=cfg.bidirectional, dropout=cfg.dropout if cfg.n_layer > 1 else 0.0)
        self.drop = nn.Dropout(cfg.dropout)
        self.classifier = nn.Linear(cfg.n_hidden * (2 if cfg.bidirectional else 1), cfg.n_classes)

    def prepare(self, ids: list[int]) -> list[int]:
        """A text's ids as the model reads them: cut to max_len (an empty text reads one pad token)."""
        return list(ids)[: self.cfg.max_len] or [self.cfg.pad_id]

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def features(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, n_hidden * directions): the text's vector the classifier reads."""
        mask = mask.to(torch.bool)
        x = self.drop(self.wte(ids))
        out, finals = run_padded(self.rnn, x, mask.sum(1))  # padding never read, at the padded kernel's speed
        if self.cfg.pooling == "last":
            return torch.cat(list(finals), dim=-1)  # forward after the last token, backward after the first
        return pool(out, mask, self.cfg.pooling)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """ids (B, T) and mask (B, T), True on real tokens -> class logits (B, n_classes)."""
        return self.classifier(self.drop(self.features(ids, mask)))
