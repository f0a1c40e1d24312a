"""Question-passage windows with the answer's place: :class:`SpanExtraction` (an extractive reader, BERT on SQuAD).

Each split is a list of windows ``(ids, segments, start, end)``: ``[CLS] question [SEP] passage-window [SEP]`` as
the family's ``pair`` builds it, its segment ids, and the token positions of the answer's first and last token in
the window (both 0, the [CLS], when the window does not hold the whole answer: BERT's SQuAD code). The loss is the
family's ``span_loss`` (the cross-entropy of the true start and of the true end, averaged), a mean over the windows
of the whole step; evaluation reports that loss and the share of windows whose argmax start and end are both right
(``span_accuracy``: a token-level figure; the answer's exact match and F1 need the text, which the stage scores)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn

from corpusforge.models.objectives.base import Batch, Objective, evaluating

Window = tuple[Sequence[int], Sequence[int], int, int]


class SpanLoss(nn.Module):
    """A reader and its loss as one module: ``(ids, segments, mask, start, end, state) -> (mean loss per window,
    None)``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids, segments, mask, start, end, state: Any = None):
        s, e = self.model(ids, segments, mask)
        return self.model.span_loss(s, e, start, end) / ids.shape[0], None


class SpanExtraction(Objective):
    """Length-bucketed batches of windows, reshuffled every epoch (corpusforge.models.batching)."""

    loss_unit = "nats/window"

    def __init__(self, splits: Mapping[str, Sequence[Window] | None], seed: int = 0):
        self.splits = {k: list(v) for k, v in splits.items() if v is not None and len(v)}
        if "train" not in self.splits:
            raise ValueError("the train split has no question window: nothing to train on")
        for split, windows in self.splits.items():
            for i, (ids, segments, start, end) in enumerate(windows):
                if len(ids) != len(segments) or not 0 <= start <= end < len(ids):
                    raise ValueError(f"{split} window {i}: start {start} and end {end} must lie in its {len(ids)} "
                                     f"tokens, start first (and as many segment ids as tokens)")
        self.seed = seed
        self.model: nn.Module | None = None

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches

        self.model = model
        self.batches = EpochBatches([len(w[0]) for w in self.splits["train"]], batch_size, self.seed, rank, world)

    def _collate(self, model, split: str, indices: list[int]) -> tuple[torch.Tensor, ...]:
        windows = [self.splits[split][i] for i in indices]
        ids, segments, mask = model.collate([(w[0], w[1]) for w in windows])
        start = torch.as_tensor([w[2] for w in windows], dtype=torch.long)
        end = torch.as_tensor([w[3] for w in windows], dtype=torch.long)
        return ids, segments, mask, start, end

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        indices, _ = self.batches.get(index)
        tensors = self._collate(self.model, "train", indices)
        return Batch(tensors, int(tensors[2].sum()), terms=len(indices))

    def loss_module(self, model: nn.Module) -> nn.Module:
        return SpanLoss(model)

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        total, right, count = 0.0, 0, 0
        with evaluating(model), torch.no_grad():
            n = len(self.splits[split])
            for b, first in enumerate(range(0, n, batch_size)):
                if max_batches and b >= max_batches:
                    break
                ids, segments, mask, start, end = (t.to(device) for t in self._collate(
                    model, split, list(range(first, min(n, first + batch_size)))))
                with autocast():
                    s, e = model(ids, segments, mask)
                total += float(model.span_loss(s.float(), e.float(), start, end))
                right += int(((s.argmax(-1) == start) & (e.argmax(-1) == end)).sum())
                count += len(start)
        return {"loss": total / max(1, count), "span_accuracy": right / max(1, count)}


def span(model_cfg: Any, splits: Mapping[str, Any], settings: Any = None) -> SpanExtraction:
    """Question-passage windows (``{split: [(ids, segments, start, end), ...]}``)."""
    return SpanExtraction(splits)
