"""Sentence pairs that belong together: :class:`Contrastive`, the in-batch contrastive loss (InfoNCE, sentence-
transformers' MultipleNegativesRankingLoss), and retrieval scores."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.objectives.base import Batch, Objective, evaluating


class ContrastiveLoss(nn.Module):
    """A sentence encoder and the in-batch contrastive loss as one module: ``(a, a_mask, b, b_mask, state) ->
    (loss, None)``. Row i of the batch's (B, B) matrix of scaled cosine similarities should peak at column i: the
    cross-entropy against the diagonal (van den Oord et al. 2018's InfoNCE; sentence-transformers'
    MultipleNegativesRankingLoss), averaged with the transposed matrix's when ``symmetric``. With ``gather`` on
    several ranks, training: the negatives are every rank's micro-batch (:func:`gathered_in_batch_loss`)."""

    def __init__(self, model: nn.Module, scale: float = 20.0, symmetric: bool = True, gather: bool = False):
        super().__init__()
        self.model, self.scale, self.symmetric, self.gather = model, scale, symmetric, gather

    def forward(self, a, a_mask, b, b_mask, state: Any = None):
        ea, eb = self.model(a, a_mask).float(), self.model(b, b_mask).float()
        if self.gather and torch.is_grad_enabled() and _world() > 1:
            return gathered_in_batch_loss(ea, eb, self.scale, self.symmetric), None
        return in_batch_loss(ea, eb, self.scale, self.symmetric), None


def _world() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def gathered_in_batch_loss(ea: torch.Tensor, eb: torch.Tensor, scale: float, symmetric: bool = True) -> torch.Tensor:
    """:func:`in_batch_loss` of this rank's pairs against the partners of every rank's micro-batch (sizes may differ:
    padded for the gather, then cut). The gather keeps the gradient (``torch.distributed.nn.functional.all_gather``):
    a rank's loss reaches the other ranks' embeddings, so the ranks' mean loss has the gradient of one batch of all
    the pairs."""
    import torch.distributed as dist
    from torch.distributed.nn.functional import all_gather

    world, rank = dist.get_world_size(), dist.get_rank()
    mine = torch.tensor([ea.shape[0]], device=ea.device)
    sizes = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(sizes, mine)
    counts = [int(s.item()) for s in sizes]
    most = max(counts)

    def every(x: torch.Tensor) -> torch.Tensor:
        parts = all_gather(F.pad(x, (0, 0, 0, most - x.shape[0])))
        return torch.cat([part[:n] for part, n in zip(parts, counts)])

    a_all, b_all = every(ea), every(eb)
    target = sum(counts[:rank]) + torch.arange(ea.shape[0], device=ea.device)
    loss = F.cross_entropy(scale * F.normalize(ea, dim=-1) @ F.normalize(b_all, dim=-1).T, target)
    if not symmetric:
        return loss
    back = F.cross_entropy(scale * F.normalize(eb, dim=-1) @ F.normalize(a_all, dim=-1).T, target)
    return (loss + back) / 2


def in_batch_loss(ea: torch.Tensor, eb: torch.Tensor, scale: float, symmetric: bool = True) -> torch.Tensor:
    sim = scale * F.normalize(ea, dim=-1) @ F.normalize(eb, dim=-1).T
    target = torch.arange(len(sim), device=sim.device)
    loss = F.cross_entropy(sim, target)
    return (loss + F.cross_entropy(sim.T, target)) / 2 if symmetric else loss


def retrieval_scores(ea: torch.Tensor, eb: torch.Tensor, chunk: int = 1024) -> dict[str, float]:
    """Each ``ea`` row's partner is the same row of ``eb``: ``top1`` (the share found first among all of ``eb`` by
    cosine similarity), ``top5`` and ``mrr`` (mean reciprocal rank); ties count against the partner."""
    a, b = F.normalize(ea.float(), dim=-1), F.normalize(eb.float(), dim=-1)
    ranks = []
    for start in range(0, len(a), chunk):
        sim = a[start: start + chunk] @ b.T
        own = sim[torch.arange(len(sim)), torch.arange(start, start + len(sim))]
        ranks.append((sim >= own.unsqueeze(1)).sum(1))  # 1 when nothing else scores as high
    r = torch.cat(ranks).double()
    return {"top1": float((r == 1).double().mean()), "top5": float((r <= 5).double().mean()),
            "mrr": float((1.0 / r).mean())}


class Contrastive(Objective):
    """Sentence pairs that belong together (a translation, a paraphrase, a question and its answer): each split is
    ``(firsts, seconds)``, lists of prepared token-id lists. Batches of pairs, length-bucketed and padded, reshuffled
    every epoch; the loss is :class:`ContrastiveLoss` (the batch's other sentences are the negatives, so a larger
    batch is a harder task). Evaluation: the loss over the split's pairs in consecutive batches of ``batch_size``,
    and retrieval over the whole split (:func:`retrieval_scores`: each first sentence finds its second among all)."""

    loss_unit = "nats/pair"

    def __init__(self, splits: Mapping[str, tuple[Any, Any]], pad_id: int, scale: float = 20.0,
                 symmetric: bool = True, seed: int = 0, gather: bool = False):
        self.splits = {}
        for name, pair in splits.items():
            if pair is None or not len(pair[0]):
                continue
            if len(pair[0]) != len(pair[1]):
                raise ValueError(f"split {name}: {len(pair[0])} first sentences but {len(pair[1])} second ones")
            self.splits[name] = (list(pair[0]), list(pair[1]))
        if "train" not in self.splits:
            raise ValueError("the train split is empty: nothing to train on")
        if len(self.splits["train"][0]) < 2:
            raise ValueError("the train split needs at least 2 pairs (the batch's other pairs are the negatives)")
        self.pad_id, self.scale, self.symmetric, self.seed, self.gather = pad_id, scale, symmetric, seed, gather

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches

        if batch_size < 2:
            raise ValueError("batch_size: in-batch negatives need at least 2 pairs per batch")
        a, b = self.splits["train"]
        self.batches = EpochBatches([len(x) + len(y) for x, y in zip(a, b)], batch_size, self.seed, rank, world)

    def _collate(self, split: str, indices: list[int]) -> tuple[torch.Tensor, ...]:
        from corpusforge.models.batching import pad

        a, b = self.splits[split]
        ia, ma = pad([a[i] for i in indices], self.pad_id)
        ib, mb = pad([b[i] for i in indices], self.pad_id)
        return ia, ma, ib, mb

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        indices, _ = self.batches.get(index)
        tensors = self._collate("train", indices)
        return Batch(tensors, int(tensors[1].sum() + tensors[3].sum()), terms=tensors[0].shape[0])

    def loss_module(self, model: nn.Module) -> nn.Module:
        return ContrastiveLoss(model, self.scale, self.symmetric, self.gather)

    def embed(self, model, sentences: list[list[int]], batch_size: int, device, autocast) -> torch.Tensor:
        from corpusforge.models.batching import pad

        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        out = [None] * len(sentences)
        for start in range(0, len(order), batch_size):
            chunk = order[start: start + batch_size]
            ids, mask = pad([sentences[i] for i in chunk], self.pad_id)
            with autocast():
                vectors = model(ids.to(device), mask.to(device)).float().cpu()
            for i, v in zip(chunk, vectors):
                out[i] = v
        return torch.stack(out)

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        """The first ``max_batches * batch_size`` pairs (all with 0)."""
        a, b = self.splits[split]
        n = len(a) if not max_batches else min(len(a), max_batches * batch_size)
        with evaluating(model):
            with torch.no_grad():
                ea = self.embed(model, a[:n], max(batch_size, 64), device, autocast)
                eb = self.embed(model, b[:n], max(batch_size, 64), device, autocast)
        losses = [in_batch_loss(ea[s: s + batch_size], eb[s: s + batch_size], self.scale, self.symmetric).item()
                  for s in range(0, n - 1, batch_size) if min(n, s + batch_size) - s >= 2]
        return {"loss": sum(losses) / len(losses) if losses else 0.0, **retrieval_scores(ea, eb)}


def contrastive(model_cfg: Any, splits: Mapping[str, Any], settings: Any = None) -> Contrastive:
    """Sentence pairs (``{split: (firsts, seconds)}``, prepared ids) with the model's pad id and the objective's
    scale and symmetry."""
    from corpusforge.models.objectives import ContrastiveSettings

    settings = settings or ContrastiveSettings(kind="contrastive")
    return Contrastive(splits, pad_id=model_cfg.pad_id, scale=settings.scale, symmetric=settings.symmetric,
                       gather=getattr(settings, "gather_across_ranks", False))
