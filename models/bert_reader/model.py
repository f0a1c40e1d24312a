"""BERT extractive question answering in one readable file (Devlin et al. 2019, §4.2 and figure 4c, SQuAD v1.1):
the question and one window of the passage read as a pair, ``[CLS] question [SEP] passage [SEP]``, segment 0 for the
question and 1 for the passage, through the bert family's body (corpusforge.models.bert.model.BertBody, held as
``body``); each token's final state -> dropout -> a linear layer with two outputs: the score of the answer starting
there and of it ending there (the paper's start vector S and end vector E). Trained with the cross-entropy of the
true start and of the true end over the window's positions, averaged (:meth:`span_loss`); a window that does not
hold the answer points both at [CLS] (position 0), as BERT's SQuAD code trains long passages.

Reading a window is :meth:`forward`; choosing the answer span (n-best starts and ends, end after start, at most a
maximum length, inside the passage) and mapping it back to characters is the caller's
(corpusforge.tasks.qa.inference), since it needs the tokens' offsets.

Its parameter names are the bert family's (``body.*``), so a pre-trained BERT checkpoint loads into it by name; the
masked-LM and NSP heads are not kept, and ``qa_outputs`` starts fresh.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.bert.model import BertBody, upgrade_weights
from corpusforge.models.bert_reader.config import BertReaderConfig
from corpusforge.models.gpt.model import init_weights


class BertReader(nn.Module):
    HEAD = ("qa_outputs.",)

    def __init__(self, cfg: BertReaderConfig):
        if None in (cfg.cls_id, cfg.sep_id, cfg.pad_id):
            raise ValueError("cls_id, sep_id, pad_id: a BERT reader reads [CLS] question [SEP] passage [SEP] padded "
                             "with [PAD]; start it from a bert checkpoint (qa.init) whose tokenizer has them")
        super().__init__()
        self.cfg = cfg
        self.body = BertBody(cfg)
        self.drop = nn.Dropout(cfg.classifier_dropout)
        self.qa_outputs = nn.Linear(cfg.n_embd, 2)
        init_weights(self.qa_outputs)

    upgrade_weights = staticmethod(upgrade_weights)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.body.wte

    def pair(self, question: Sequence[int], passage: Sequence[int]) -> tuple[list[int], list[int]]:
        """(ids, segments) of ``[CLS] question [SEP] passage [SEP]``; the caller keeps it within block_size."""
        cfg = self.cfg
        ids = [cfg.cls_id, *question, cfg.sep_id, *passage, cfg.sep_id]
        return ids, [0] * (len(question) + 2) + [1] * (len(passage) + 1)

    def collate(self, windows: Sequence[tuple[Sequence[int], Sequence[int]]]) -> tuple[torch.Tensor, ...]:
        """Windows, each (ids, segments) -> (ids (B, T), segments (B, T), mask (B, T): True on real tokens)."""
        T = max(len(ids) for ids, _ in windows)
        if T > self.cfg.block_size:
            raise ValueError(f"a window of {T} tokens is longer than the model's block_size {self.cfg.block_size}")
        ids = torch.full((len(windows), T), self.cfg.pad_id, dtype=torch.long)
        segments = torch.zeros((len(windows), T), dtype=torch.long)
        mask = torch.zeros((len(windows), T), dtype=torch.bool)
        for b, (row, seg) in enumerate(windows):
            ids[b, : len(row)] = torch.as_tensor(list(row))
            segments[b, : len(seg)] = torch.as_tensor(list(seg))
            mask[b, : len(row)] = True
        return ids, segments, mask

    def forward(self, ids: torch.Tensor, segments: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (start scores (B, T), end scores (B, T)), padding at -inf."""
        states, _ = self.body(ids, segments, mask)
        logits = self.qa_outputs(self.drop(states)).float()
        logits = logits.masked_fill(~mask.unsqueeze(-1), float("-inf"))
        return logits[..., 0], logits[..., 1]

    @staticmethod
    def span_loss(start: torch.Tensor, end: torch.Tensor, gold_start: torch.Tensor,
                  gold_end: torch.Tensor) -> torch.Tensor:
        """Each window's (cross-entropy of the true start + of the true end) / 2, summed over the batch (BERT's
        SQuAD loss, per window)."""
        return (F.cross_entropy(start, gold_start, reduction="sum") + F.cross_entropy(end, gold_end, reduction="sum")) / 2

    def flops_per_token(self, T: int | None = None) -> float:
        return self.body.flops_per_token(T, heads=sum(p.numel() for p in self.qa_outputs.parameters()))
