"""BERT with a classification head, in one readable file (Devlin et al. 2019, figure 4b): ``[CLS] text [SEP]``
through the bert family's body (corpusforge.models.bert.model.BertBody, held as ``body``), then the pooled ``[CLS]``
state (dense + tanh, BERT's pooler) -> dropout -> a linear layer over the classes. ``pooling: mean`` or ``max``
reads the mean or maximum of the real tokens' states instead (corpusforge.models.pooling), as SBERT does.

Its parameter names are the bert family's (``body.*``, ``pooler``), so a pre-trained BERT checkpoint loads into it by
name; the masked-LM and NSP heads are not kept (the classify stage reports them as not loaded), and ``classifier``
starts fresh. ``HEAD`` names the task head's parameters, the ones trained when ``classify.finetune`` is ``head``
(and, beside LoRA adapters on the body, when it is ``lora``).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from corpusforge.models.bert.model import BertBody, upgrade_weights
from corpusforge.models.bert_classifier.config import BertClassifierConfig
from corpusforge.models.gpt.model import init_weights
from corpusforge.models.pooling import pool


class BertClassifier(nn.Module):
    HEAD = ("pooler.", "classifier.")

    def __init__(self, cfg: BertClassifierConfig):
        if None in (cfg.cls_id, cfg.sep_id, cfg.pad_id):
            raise ValueError("cls_id, sep_id, pad_id: a BERT classifier reads [CLS] text [SEP] padded with [PAD]; "
                             "set tokenizer.roles cls, sep and pad")
        super().__init__()
        self.cfg = cfg
        self.body = BertBody(cfg)
        self.pooler = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.drop_head = nn.Dropout(cfg.classifier_dropout)
        self.classifier = nn.Linear(cfg.n_embd, cfg.n_classes)
        for layer in (self.pooler, self.classifier):
            init_weights(layer)

    upgrade_weights = staticmethod(upgrade_weights)

    def prepare(self, ids: list[int]) -> list[int]:
        """A text's ids as the model reads them: ``[CLS] ids [SEP]``, cut to block_size."""
        return [self.cfg.cls_id, *list(ids)[: self.cfg.block_size - 2], self.cfg.sep_id]

    def get_input_embeddings(self) -> nn.Embedding:
        return self.body.wte

    def features(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, C): what the classifier reads, the pooled [CLS] state or the mean/max of the real tokens' states."""
        states, _ = self.body(ids, None, mask.to(torch.bool))
        if self.cfg.pooling == "cls":
            return torch.tanh(self.pooler(states[:, 0]))  # BERT's pooler: tanh(W h_[CLS] + b)
        return pool(states, mask.to(torch.bool), self.cfg.pooling)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """ids (B, T) and mask (B, T), True on real tokens -> class logits (B, n_classes)."""
        return self.classifier(self.drop_head(self.features(ids, mask)))

    def flops_per_token(self, T: int | None = None) -> float:
        head = sum(p.numel() for n, p in self.named_parameters() if n.startswith(self.HEAD))
        return self.body.flops_per_token(T, heads=head)
