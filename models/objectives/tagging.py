"""Sentences with a tag per word: :class:`Tagging` (sequence labelling: part of speech, named entities).

Each split is ``(sentences, tags)``: a sentence in the form the family's ``collate`` reads (the BiLSTM tagger's:
word ids and the character ids of each word), its tags one id per word. The loss is the family's ``tag_loss``
(each word's cross-entropy, or a CRF's negative log-likelihood of the sentence's tag sequence), averaged over the
words of the whole step; evaluation reports that loss and the share of words tagged right (the decoded tags: the
argmax, or the CRF's Viterbi path)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn as nn

from corpusforge.models.objectives.base import IGNORE, Batch, Objective, evaluating


class TaggerLoss(nn.Module):
    """A tagger and its loss as one module: ``(*inputs, tags, state) -> (mean loss per word, None)``; the inputs
    are what the family's ``collate`` gives, the word mask last."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args: Any):
        *inputs, tags, _state = args
        total, words = self.model.tag_loss(self.model(*inputs), tags, inputs[-1])
        return total / max(1, words), None


def pad_tags(tags: list[list[int]], width: int) -> torch.Tensor:
    """(B, width) tag ids, IGNORE after each sentence's end (and past ``width``: cut)."""
    out = torch.full((len(tags), width), IGNORE, dtype=torch.long)
    for b, row in enumerate(tags):
        row = list(row)[:width]
        out[b, : len(row)] = torch.as_tensor(row, dtype=torch.long)
    return out


class Tagging(Objective):
    """Length-bucketed batches of tagged sentences, reshuffled every epoch (corpusforge.models.batching)."""

    loss_unit = "nats/word"

    def __init__(self, splits: Mapping[str, tuple[Any, Any]], seed: int = 0):
        self.splits = {k: (list(v[0]), [list(t) for t in v[1]]) for k, v in splits.items()
                       if v is not None and len(v[0])}
        if "train" not in self.splits:
            raise ValueError("the train split is empty: nothing to train on")
        for split, (sentences, tags) in self.splits.items():
            if len(sentences) != len(tags):
                raise ValueError(f"{split}: {len(sentences)} sentences but {len(tags)} tag sequences")
        self.seed = seed
        self.model: nn.Module | None = None

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches

        self.model = model
        self.batches = EpochBatches([len(t) for t in self.splits["train"][1]], batch_size, self.seed, rank, world)

    def _collate(self, model, split: str, indices: list[int]) -> tuple[torch.Tensor, ...]:
        sentences, tags = self.splits[split]
        inputs = model.collate([sentences[i] for i in indices])
        mask = inputs[-1]
        # a word the model did not read (cut by its max_len, or its sub-words past a BERT's block) carries no label
        return (*inputs, pad_tags([tags[i] for i in indices], mask.shape[1]).masked_fill(~mask, IGNORE))

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        indices, _ = self.batches.get(index)
        tensors = self._collate(self.model, "train", indices)
        mask, tags = tensors[-2], tensors[-1]
        return Batch(tensors, int(mask.sum()), terms=int((tags != IGNORE).sum()))

    def loss_module(self, model: nn.Module) -> nn.Module:
        return TaggerLoss(model)

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        total, words, right = 0.0, 0, 0
        with evaluating(model), torch.no_grad():
            n = len(self.splits[split][0])
            for b, start in enumerate(range(0, n, batch_size)):
                if max_batches and b >= max_batches:
                    break
                *inputs, tags = (t.to(device) for t in self._collate(model, split, list(range(start, min(n, start + batch_size)))))
                with autocast():
                    emissions = model(*inputs)
                loss, count = model.tag_loss(emissions, tags, inputs[-1])
                total, words = total + float(loss), words + count
                for row, gold in zip(model.decode(emissions, inputs[-1]), tags.tolist()):
                    right += sum(p == g for p, g in zip(row, gold) if g != IGNORE)
        return {"loss": total / max(1, words), "accuracy": right / max(1, words)}


def tagging(model_cfg: Any, splits: Mapping[str, Any], settings: Any = None) -> Tagging:
    """Tagged sentences (``{split: (sentences, tag ids)}``)."""
    return Tagging(splits)
