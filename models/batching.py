"""Batches of variable-length examples, one collate for every family that reads records rather than a stream.

Encoded named-field corpora hold one list of token ids per field (``src_ids``, ``tgt_ids``, ``text_ids``, ...;
corpusforge.tasks.tokenizer). An objective that trains on them (seq2seq, classification, SBERT, SFT, DPO) draws
its batches here:

- :func:`pad` turns sequences into a ``(B, T)`` id tensor padded with the tokenizer's pad id and a ``(B, T)``
  boolean mask that is True on real tokens;
- :func:`length_buckets` groups examples of similar length (shuffled chunks sorted by length, then the batches
  shuffled), so little of a batch is padding, while the order is still random from epoch to epoch;
- :class:`EpochBatches` serves batch ``k`` of the whole run (epoch after epoch, reshuffled each time) from a saved
  generator state, so the trainer's exact resume holds for these objectives too.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad(sequences: Sequence[Sequence[int]], pad_id: int, max_len: int | None = None,
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids (B, T), mask (B, T))``: each sequence left-aligned, cut to ``max_len`` if given, the rest ``pad_id``;
    ``mask`` is True on real tokens. T is the longest (cut) sequence, at least 1."""
    cut = [list(s[:max_len]) if max_len is not None else list(s) for s in sequences]
    width = max([len(s) for s in cut] + [1])
    ids = torch.full((len(cut), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(cut), width), dtype=torch.bool)
    for row, seq in enumerate(cut):
        if seq:
            ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            mask[row, : len(seq)] = True
    return ids, mask


def length_buckets(lengths: Sequence[int], batch_size: int, gen: torch.Generator, chunk_batches: int = 50,
                   ) -> list[list[int]]:
    """Indices of the examples in batches of ``batch_size`` (the last may be smaller): shuffle, sort each chunk of
    ``chunk_batches`` batches by length, cut it into batches, shuffle the batches. Deterministic given ``gen``."""
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
    order = torch.randperm(len(lengths), generator=gen).tolist()
    chunk = batch_size * max(1, chunk_batches)
    batches: list[list[int]] = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start: start + chunk], key=lambda i: lengths[i])
        batches.extend(part[i: i + batch_size] for i in range(0, len(part), batch_size))
    shuffled = torch.randperm(len(batches), generator=gen).tolist()
    return [batches[i] for i in shuffled]


class EpochBatches:
    """Batch ``k`` of a run over ``len(lengths)`` examples: epoch ``k // per_epoch`` is bucketed by
    :func:`length_buckets` with a generator seeded from ``seed`` and the epoch, so any batch can be found again
    from its number alone (exact resume needs no saved order). Under DDP each rank takes every ``world``-th batch."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int = 0, rank: int = 0, world: int = 1):
        if not lengths:
            raise ValueError("no examples to batch")
        self.lengths, self.batch_size, self.seed, self.rank, self.world = list(lengths), batch_size, seed, rank, world
        self._epoch, self._batches = -1, []
        self.per_epoch = max(1, len(self._order(0)) // world)

    def _order(self, epoch: int) -> list[list[int]]:
        if epoch != self._epoch:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._epoch, self._batches = epoch, length_buckets(self.lengths, self.batch_size, gen)
        return self._batches

    def get(self, k: int) -> tuple[list[int], bool]:
        """The example indices of batch ``k`` and whether it starts an epoch."""
        epoch, j = divmod(k, self.per_epoch)
        batches = self._order(epoch)
        return batches[(j * self.world + self.rank) % len(batches)], j == 0
