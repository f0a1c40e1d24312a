"""Labelled sequences: :class:`Classification` (one class per text, the cross-entropy of the class)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.objectives.base import Batch, Objective, evaluating


class ClassifierLoss(nn.Module):
    """A classifier and its mean cross-entropy as one module: ``(ids, mask, labels, state) -> (loss, None)``; the
    model maps ``(ids (B, T), mask (B, T))`` to class logits ``(B, C)`` (the ``classify`` capability)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor, state: Any = None):
        return F.cross_entropy(self.model(ids, mask).float(), labels), None


class Classification(Objective):
    """Labelled sequences: each split is ``(sequences, labels)`` (lists of token ids, class indices). Batches are
    length-bucketed and padded with ``pad_id`` (corpusforge.models.batching), reshuffled every epoch; the loss is
    the cross-entropy of the class; evaluation reports the loss and the accuracy over the whole split."""

    loss_unit = "nats/example"

    def __init__(self, splits: Mapping[str, tuple[Any, Any]], pad_id: int, max_len: int | None = None,
                 seed: int = 0):
        self.splits = {k: (list(v[0]), torch.as_tensor(np.asarray(v[1]), dtype=torch.long))
                       for k, v in splits.items() if v is not None and len(v[0])}
        if "train" not in self.splits:
            raise ValueError("the train split is empty: nothing to train on")
        self.pad_id, self.max_len, self.seed = pad_id, max_len, seed

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches

        sequences, _ = self.splits["train"]
        self.batches = EpochBatches([len(s) for s in sequences], batch_size, self.seed, rank, world)

    def _collate(self, split: str, indices: list[int]) -> tuple[torch.Tensor, ...]:
        from corpusforge.models.batching import pad

        sequences, labels = self.splits[split]
        ids, mask = pad([sequences[i] for i in indices], self.pad_id, self.max_len)
        return ids, mask, labels[indices]

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        indices, _ = self.batches.get(index)
        ids, mask, labels = self._collate("train", indices)
        return Batch((ids, mask, labels), int(mask.sum()), terms=labels.numel())

    def loss_module(self, model: nn.Module) -> nn.Module:
        return ClassifierLoss(model)

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        total, correct, count = 0.0, 0, 0
        with evaluating(model):
            with torch.no_grad():
                n = len(self.splits[split][0])
                for b, start in enumerate(range(0, n, batch_size)):
                    if max_batches and b >= max_batches:
                        break
                    ids, mask, labels = (t.to(device) for t in self._collate(split, list(range(start, min(n, start + batch_size)))))
                    with autocast():
                        logits = model(ids, mask).float()
                    total += F.cross_entropy(logits, labels, reduction="sum").item()
                    correct += int((logits.argmax(-1) == labels).sum())
                    count += len(labels)
        return {"loss": total / count, "accuracy": correct / count}


def classification(model_cfg: Any, splits: Mapping[str, Any], settings: Any = None) -> Classification:
    """Labelled sequences (``{split: (sequences, class indices)}``), padded with the model's ``pad_id``."""
    return Classification(splits, pad_id=model_cfg.pad_id, max_len=getattr(model_cfg, "max_len", None))
