"""A sentence encoder (SBERT) in one readable file: ``[CLS] sentence [SEP]`` through the bert family's body
(corpusforge.models.bert.model.BertBody, held as ``body``), then the token states pooled over the real tokens
(corpusforge.models.pooling: mean, max or the [CLS] state) into one vector. Siamese: both sentences of a pair go
through the same weights; the in-batch contrastive objective (corpusforge.models.objectives.Contrastive) pulls a
pair's vectors together and pushes the batch's other sentences away. Its parameter names are the bert family's
(``body.*``), so a pre-trained BERT loads into it by name (the masked-LM, NSP and pooler heads are not used)."""

from __future__ import annotations

import torch
import torch.nn as nn

from corpusforge.models.bert.model import BertBody, upgrade_weights
from corpusforge.models.pooling import pool
from corpusforge.models.sbert.config import SBertConfig


class SentenceEncoder(nn.Module):
    def __init__(self, cfg: SBertConfig):
        if None in (cfg.cls_id, cfg.sep_id, cfg.pad_id):
            raise ValueError("cls_id, sep_id, pad_id: a sentence encoder reads [CLS] text [SEP] padded with [PAD]; "
                             "set tokenizer.roles cls, sep and pad")
        super().__init__()
        self.cfg = cfg
        self.body = BertBody(cfg)

    upgrade_weights = staticmethod(upgrade_weights)

    def prepare(self, ids: list[int]) -> list[int]:
        """A sentence's ids as the model reads them: ``[CLS] ids [SEP]``, cut to block_size."""
        return [self.cfg.cls_id, *list(ids)[: self.cfg.block_size - 2], self.cfg.sep_id]

    def get_input_embeddings(self) -> nn.Embedding:
        return self.body.wte

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """ids (B, T) and mask (B, T), True on real tokens -> one vector per sentence (B, n_embd), not normalised."""
        states, _ = self.body(ids, None, mask.to(torch.bool))
        return pool(states, mask.to(torch.bool), self.cfg.pooling)

    def flops_per_token(self, T: int | None = None) -> float:
        return self.body.flops_per_token(T)
