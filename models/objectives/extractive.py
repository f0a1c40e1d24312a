"""Documents whose sentences are labelled in or out of the summary: :class:`Extractive` (a sentence scorer's binary
cross-entropy per sentence)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.objectives.base import Batch, Objective, evaluating


def pad_documents(docs: list[list[list[int]]], pad_id: int, max_sentences: int | None = None,
                  max_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Documents (lists of sentences' token ids) as ``(ids, token_mask)`` (B, S, T) and ``sentence_mask`` (B, S),
    each document cut to ``max_sentences`` and each sentence to ``max_len`` tokens."""
    docs = [[list(s)[:max_len] if max_len else list(s) for s in d[:max_sentences]] for d in docs]
    S = max(1, max(len(d) for d in docs))
    T = max(1, max((len(s) for d in docs for s in d), default=1))
    ids = torch.full((len(docs), S, T), pad_id, dtype=torch.long)
    token_mask = torch.zeros(len(docs), S, T, dtype=torch.bool)
    sentence_mask = torch.zeros(len(docs), S, dtype=torch.bool)
    for b, doc in enumerate(docs):
        for s, sentence in enumerate(doc):
            sentence_mask[b, s] = True
            if sentence:
                ids[b, s, : len(sentence)] = torch.tensor(sentence, dtype=torch.long)
                token_mask[b, s, : len(sentence)] = True
    return ids, token_mask, sentence_mask


class ExtractiveLoss(nn.Module):
    """A sentence scorer and its mean binary cross-entropy over the real sentences as one module:
    ``(ids, token_mask, sentence_mask, labels, state) -> (loss, None)``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids, token_mask, sentence_mask, labels, state: Any = None):
        logits = self.model(ids, token_mask, sentence_mask).float()
        real = sentence_mask.to(torch.bool)
        return F.binary_cross_entropy_with_logits(logits[real], labels[real]), None


class Extractive(Objective):
    """Documents: each split is ``(documents, labels)``, a document a list of sentences' token ids and its labels
    one 0/1 per sentence (1: in the summary). Batches are bucketed by the documents' token counts and padded to
    (B, S, T); the loss is the binary cross-entropy per real sentence (the trainer weighs micro-batches by their
    sentences). Evaluation: the loss and ``top1``, the share of documents whose best-scored sentence is labelled 1."""

    loss_unit = "nats/sentence"

    def __init__(self, splits: Mapping[str, tuple[Any, Any]], pad_id: int, max_len: int | None = None,
                 max_sentences: int | None = None, seed: int = 0):
        self.splits = {}
        for name, pair in splits.items():
            if pair is None or not len(pair[0]):
                continue
            docs, labels = list(pair[0]), [list(x) for x in pair[1]]
            if len(docs) != len(labels) or any(len(d) != len(x) for d, x in zip(docs, labels)):
                raise ValueError(f"split {name}: every document needs one label per sentence")
            self.splits[name] = (docs, labels)
        if "train" not in self.splits:
            raise ValueError("the train split is empty: nothing to train on")
        self.pad_id, self.max_len, self.max_sentences, self.seed = pad_id, max_len, max_sentences, seed

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches

        docs, _ = self.splits["train"]
        self.batches = EpochBatches([sum(len(s) for s in d) for d in docs], batch_size, self.seed, rank, world)

    def _collate(self, split: str, indices: list[int]) -> tuple[torch.Tensor, ...]:
        docs, labels = self.splits[split]
        ids, token_mask, sentence_mask = pad_documents([docs[i] for i in indices], self.pad_id, self.max_sentences,
                                                       self.max_len)
        target = torch.zeros(sentence_mask.shape, dtype=torch.float)
        for b, i in enumerate(indices):
            row = labels[i][: sentence_mask.shape[1]]
            target[b, : len(row)] = torch.tensor(row, dtype=torch.float)
        return ids, token_mask, sentence_mask, target

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        indices, _ = self.batches.get(index)
        tensors = self._collate("train", indices)
        return Batch(tensors, int(tensors[1].sum()), terms=int(tensors[2].sum()))

    def loss_module(self, model: nn.Module) -> nn.Module:
        return ExtractiveLoss(model)

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        total, count, hits, docs = 0.0, 0, 0, 0
        n = len(self.splits[split][0])
        with evaluating(model):
            with torch.no_grad():
                for b, start in enumerate(range(0, n, batch_size)):
                    if max_batches and b >= max_batches:
                        break
                    ids, token_mask, sentence_mask, target = (
                        t.to(device) for t in self._collate(split, list(range(start, min(n, start + batch_size)))))
                    with autocast():
                        logits = model(ids, token_mask, sentence_mask).float()
                    real = sentence_mask.to(torch.bool)
                    total += F.binary_cross_entropy_with_logits(logits[real], target[real], reduction="sum").item()
                    count += int(real.sum())
                    best = logits.argmax(-1)
                    hits += int(target.gather(1, best[:, None]).sum())
                    docs += len(best)
        return {"loss": total / count, "top1": hits / docs}


def extractive(model_cfg: Any, splits: Mapping[str, Any], settings: Any = None) -> Extractive:
    """Documents with labelled sentences (``{split: (documents, labels)}``), padded with the model's ``pad_id``."""
    return Extractive(splits, pad_id=model_cfg.pad_id, max_len=getattr(model_cfg, "max_len", None),
                      max_sentences=getattr(model_cfg, "max_sentences", None))
