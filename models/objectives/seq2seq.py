"""Source-target pairs for encoder-decoders: :class:`Seq2Seq` (teacher forcing, label smoothing, padding ignored)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.contracts import hook
from corpusforge.models.objectives.base import IGNORE, Batch, Objective, evaluating


class Seq2SeqLoss(nn.Module):
    """An encoder-decoder and its label-smoothed cross-entropy as one module:
    ``(src, src_mask, tgt_in, tgt_mask, target, state) -> (loss, None)``; the model maps
    ``(src, src_mask, tgt_in, tgt_mask)`` to logits ``(B, T_tgt, V)`` (the ``translate`` capability). Targets of
    ``IGNORE`` (padding) carry no loss, and the mean is over the real target tokens."""

    def __init__(self, model: nn.Module, label_smoothing: float = 0.0):
        super().__init__()
        self.model, self.label_smoothing = model, label_smoothing

    def forward(self, src, src_mask, tgt_in, tgt_mask, target, state: Any = None):
        logits = self.model(src, src_mask, tgt_in, tgt_mask)
        return F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), ignore_index=IGNORE,
                               label_smoothing=self.label_smoothing), None


class Seq2Seq(Objective):
    """Source-target pairs: each split is ``(sources, targets)``, lists of token-id lists without bos/eos. A pair
    becomes ``src``, ``tgt_in = [bos] + target`` (what the decoder reads, teacher forcing) and
    ``target + [eos]`` (what it predicts), each cut to ``max_len``; batches are length-bucketed and padded
    (corpusforge.models.batching), reshuffled every epoch and found again by number (exact resume). The loss is the
    cross-entropy over the real target tokens, label-smoothed (Szegedy et al. 2016; the Transformer's 0.1); the
    trainer counts the real target tokens. Evaluation: the plain (unsmoothed) cross-entropy per target token and
    its perplexity over the split."""

    def __init__(self, splits: Mapping[str, tuple[Any, Any]], pad_id: int, bos_id: int, eos_id: int,
                 label_smoothing: float = 0.0, max_len: int | None = None, seed: int = 0):
        if None in (pad_id, bos_id, eos_id):
            raise ValueError(f"pad_id, bos_id, eos_id: an encoder-decoder needs the tokenizer's pad, bos and eos "
                             f"roles, got {pad_id}, {bos_id}, {eos_id}")
        if max_len is not None and max_len < 2:
            raise ValueError(f"max_len: must be >= 2 (bos or eos and one token), got {max_len}")
        self.splits = {}
        for name, pair in splits.items():
            if pair is None or not len(pair[0]):
                continue
            sources, targets = list(pair[0]), list(pair[1])
            if len(sources) != len(targets):
                raise ValueError(f"split {name}: {len(sources)} sources but {len(targets)} targets")
            self.splits[name] = (sources, targets)
        if "train" not in self.splits:
            raise ValueError("the train split is empty: nothing to train on")
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.label_smoothing, self.max_len, self.seed = label_smoothing, max_len, seed

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches

        sources, targets = self.splits["train"]
        lengths = [len(s) + len(t) for s, t in zip(sources, targets)]  # buckets of similar total length
        self.batches = EpochBatches(lengths, batch_size, self.seed, rank, world)

    def collate(self, sources: Any, targets: Any) -> tuple[torch.Tensor, ...]:
        """``(src, src_mask, tgt_in, tgt_mask, target)``; ``target`` is ``IGNORE`` past each row's end. A target
        cut by ``max_len`` loses its eos (it did not end there)."""
        from corpusforge.models.batching import pad

        cut = self.max_len
        src, src_mask = pad([list(s) for s in sources], self.pad_id, cut)
        tgt_in, tgt_mask = pad([[self.bos_id, *t] for t in targets], self.pad_id, cut)
        target, _ = pad([[*t, self.eos_id] for t in targets], IGNORE, cut)
        return src, src_mask, tgt_in, tgt_mask, target

    def _pairs(self, split: str, indices: list[int]) -> tuple[torch.Tensor, ...]:
        sources, targets = self.splits[split]
        return self.collate([sources[i] for i in indices], [targets[i] for i in indices])

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        indices, _ = self.batches.get(index)
        tensors = self._pairs("train", indices)
        return Batch(tensors, int(tensors[3].sum()), terms=int((tensors[4] != IGNORE).sum()))

    def loss_module(self, model: nn.Module) -> nn.Module:
        return Seq2SeqLoss(model, self.label_smoothing)

    def flops_per_token(self, model: nn.Module) -> float:
        flops = hook(model, "flops_per_token")
        return flops() if flops else 0.0

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        """The first ``max_batches * batch_size`` pairs (all with 0), batched by length (little padding; the sum
        does not depend on the order)."""
        sources, targets = self.splits[split]
        n = len(sources) if not max_batches else min(len(sources), max_batches * batch_size)
        order = sorted(range(n), key=lambda i: (len(sources[i]) + len(targets[i]), i))
        total, count = 0.0, 0
        with evaluating(model):
            with torch.no_grad():
                for start in range(0, n, batch_size):
                    src, src_mask, tgt_in, tgt_mask, target = (
                        t.to(device) for t in self._pairs(split, order[start: start + batch_size]))
                    with autocast():
                        logits = model(src, src_mask, tgt_in, tgt_mask)
                    total += F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), ignore_index=IGNORE,
                                             reduction="sum").item()
                    count += int(tgt_mask.sum())
        loss = total / count
        return {"loss": loss, "ppl": math.exp(min(loss, 700.0))}


def seq2seq(model_cfg: Any, splits: Mapping[str, Any], settings: Any = None) -> Seq2Seq:
    """Source-target pairs (``{split: (sources, targets)}``) with the model's pad/bos/eos ids and ``max_len``, and
    the objective's ``label_smoothing``."""
    from corpusforge.models.objectives import Seq2SeqSettings

    settings = settings or Seq2SeqSettings(kind="seq2seq")
    return Seq2Seq(splits, pad_id=model_cfg.pad_id, bos_id=model_cfg.bos_id, eos_id=model_cfg.eos_id,
                   label_smoothing=settings.label_smoothing, max_len=getattr(model_cfg, "max_len", None))
