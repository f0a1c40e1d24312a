"""Language modelling on a token stream: :class:`CausalLM` (random windows, nanoGPT) and :class:`TruncatedBPTT`
(contiguous streams, the recurrent state carried and detached at each boundary; Zaremba et al. 2014)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.contracts import hook
from corpusforge.models.objectives.base import IGNORE, Batch, Objective, evaluating, loss_metrics


class NextTokenLoss(nn.Module):
    """A model and its mean cross-entropy as one module: ``(x, y, state) -> (loss, state)``.

    Compiled as one graph, the cross-entropy is fused into the head's output: the float32 copy of the
    (batch, block, vocab) logits and its log-softmax are never written out (nanoGPT computes its loss
    inside the compiled forward for the same reason). Targets of ``IGNORE`` carry no loss (masked LM)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor, state: Any = None) -> tuple[torch.Tensor, Any]:
        logits, new_state = self.model(x, state)
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten()), new_state


def as_tokens(data: Any) -> np.ndarray:
    arr = np.asarray(data)
    if arr.ndim != 1:
        raise ValueError("token data must be a flat 1-D array of ids")
    return arr


def random_windows(data: np.ndarray, block: int, batch: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` random windows of ``block`` tokens and their one-step-shifted targets (nanoGPT)."""
    starts = torch.randint(len(data) - block - 1 + 1, (batch,), generator=gen).numpy()
    rows = starts[:, None] + np.arange(block + 1)
    chunk = torch.from_numpy(data[rows].astype(np.int64))
    return chunk[:, :-1], chunk[:, 1:]


class StreamBatches:
    """Contiguous streams for recurrent models: the data is cut into ``batch`` equal rows and read left to
    right ``block`` steps at a time, so row b of batch k+1 continues row b of batch k."""

    def __init__(self, data: np.ndarray, block: int, batch: int, part: int = 0, parts: int = 1):
        n = (len(data) - 1) // (batch * parts)
        if n <= block:
            raise ValueError(f"a split of {len(data)} tokens is too short for {batch * parts} streams of >{block} tokens")
        rows = range(part * batch, (part + 1) * batch)  # under DDP each rank reads its own rows
        self.x = np.stack([data[b * n: b * n + n] for b in rows])
        self.y = np.stack([data[b * n + 1: b * n + n + 1] for b in rows])
        self.block, self.per_epoch = block, n // block

    def get(self, k: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """Batch k (wrapping around); the flag says a new pass starts (the state must be reset)."""
        j = k % self.per_epoch
        s = slice(j * self.block, (j + 1) * self.block)
        return (torch.from_numpy(self.x[:, s].astype(np.int64)), torch.from_numpy(self.y[:, s].astype(np.int64)), j == 0)


def detach_state(state: Any) -> Any:
    """Cut the graph at the batch boundary (truncated BPTT) while keeping the values."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return tuple(s.detach() for s in state)
    return state.detach()


class TokenStream(Objective):
    """A language-modelling objective over flat token splits (``train``, ``valid``, ``test``; 1-D id arrays)."""

    def __init__(self, splits: Mapping[str, Any], block: int):
        self.splits = {name: as_tokens(data) for name, data in splits.items() if data is not None}
        if "train" not in self.splits:
            raise ValueError("the train split is empty: nothing to train on")
        self.block = block

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def loss_module(self, model: nn.Module) -> nn.Module:
        return NextTokenLoss(model)

    def flops_per_token(self, model: nn.Module) -> float:
        flops = hook(model, "flops_per_token")
        return flops(self.block) if flops else 0.0

    def _windows_score(self, model, data, batch_size, max_batches, device, autocast, prepare=None) -> dict[str, float]:
        """Mean cross-entropy over consecutive non-overlapping windows of the split (deterministic); ``prepare``
        turns (x, y) into what is scored (masked LM)."""
        total, count = 0.0, 0
        windows = (len(data) - 1) // self.block
        starts = np.arange(windows) * self.block
        if max_batches:
            starts = starts[: max_batches * batch_size]
        for i in range(0, len(starts), batch_size):
            rows = starts[i: i + batch_size, None] + np.arange(self.block + 1)
            chunk = torch.from_numpy(data[rows].astype(np.int64))
            x, y = chunk[:, :-1], chunk[:, 1:]
            if prepare is not None:
                x, y = prepare(x, y)
            x, y = x.to(device), y.to(device)
            with autocast():
                logits, _ = model(x)
            total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").item()
            count += int((y != IGNORE).sum())
        return self._mean(total, count, data)

    def _mean(self, total: float, count: int, data) -> dict[str, float]:
        if count == 0:
            raise ValueError(f"the evaluation split ({len(data)} tokens) is shorter than one window of {self.block + 1}")
        self.scored_tokens = count  # how many predictions the last evaluation scored (lm evaluate reports it)
        return loss_metrics(total / count)

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        with evaluating(model):
            with torch.no_grad():
                return self._score(model, self.splits[split], batch_size, max_batches, device, autocast)

    def _score(self, model, data, batch_size, max_batches, device, autocast) -> dict[str, float]:
        return self._windows_score(model, data, batch_size, max_batches, device, autocast)


class CausalLM(TokenStream):
    """Random windows; every position predicts the next token."""

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        x, y = random_windows(self.splits["train"], self.block, self.batch_size, gen)
        return Batch((x, y), x.numel(), terms=y.numel())

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        self.batch_size = batch_size


class TruncatedBPTT(TokenStream):
    """Contiguous streams read in order; the state flows from batch to batch, detached at each boundary (the
    trainer keeps it in its checkpoints). One process only: the order is the point."""

    carries_state = True

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        self.streams = StreamBatches(self.splits["train"], self.block, batch_size, rank, world)

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        x, y, fresh = self.streams.get(index)
        return Batch((x, y), x.numel(), fresh, terms=y.numel())

    def carry(self, state: Any) -> Any:
        return detach_state(state)

    def _score(self, model, data, batch_size, max_batches, device, autocast) -> dict[str, float]:
        """The split as ``batch_size`` contiguous streams, the state carried through."""
        streams = StreamBatches(data, self.block, min(batch_size, max(1, (len(data) - 1) // (self.block + 1))))
        n = streams.per_epoch if not max_batches else min(max_batches, streams.per_epoch)
        total, count, state = 0.0, 0, None
        for k in range(n):
            x, y, _ = streams.get(k)
            with autocast():
                logits, state = model(x.to(device), state)
            total += F.cross_entropy(logits.float().flatten(0, 1), y.to(device).flatten(), reduction="sum").item()
            count += y.numel()
        return self._mean(total, count, data)


def causal_lm(model_cfg: Any, splits: Mapping[str, Any], settings: Any = None) -> CausalLM:
    return CausalLM(splits, model_cfg.block_size)


def truncated_bptt(model_cfg: Any, splits: Mapping[str, Any], settings: Any = None) -> TruncatedBPTT:
    return TruncatedBPTT(splits, model_cfg.block_size)
