"""The shared padding collate and length buckets (corpusforge.models.batching)."""

from __future__ import annotations

import pytest
import torch

from corpusforge.models.batching import EpochBatches, length_buckets, pad


def test_pad_gives_ids_and_a_mask_of_the_real_tokens():
    ids, mask = pad([[5, 6, 7], [8], []], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert mask.tolist() == [[True, True, True], [True, False, False], [False, False, False]]
    ids, mask = pad([[1, 2, 3, 4], [9]], pad_id=3, max_len=2)
    assert ids.tolist() == [[1, 2], [9, 3]] and mask.sum().item() == 3
    assert pad([], pad_id=0)[0].shape == (0, 1)


def test_length_buckets_cover_every_example_once_and_pad_little():
    lengths = [int(x) for x in torch.randint(1, 200, (1000,), generator=torch.Generator().manual_seed(0))]
    batches = length_buckets(lengths, 16, torch.Generator().manual_seed(1))
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert all(len(b) <= 16 for b in batches) and sum(len(b) == 16 for b in batches) >= 1000 // 16 - 2
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    naive = length_buckets(lengths, 16, torch.Generator().manual_seed(1), chunk_batches=0)  # chunk of one batch
    padded_naive = sum(len(b) * max(lengths[i] for i in b) for b in naive)
    assert padded < 0.7 * padded_naive  # sorting within chunks cuts the padding
    again = length_buckets(lengths, 16, torch.Generator().manual_seed(1))
    assert again == batches  # deterministic given the generator


def test_epoch_batches_reshuffle_each_epoch_and_can_be_found_by_number():
    lengths = list(range(1, 101))
    eb = EpochBatches(lengths, 10, seed=3)
    first = [eb.get(k)[0] for k in range(eb.per_epoch)]
    second = [eb.get(k)[0] for k in range(eb.per_epoch, 2 * eb.per_epoch)]
    assert sorted(i for b in first for i in b) == list(range(100)) and first != second
    assert eb.get(0)[1] and not eb.get(1)[1] and eb.get(eb.per_epoch)[1]
    fresh = EpochBatches(lengths, 10, seed=3)
    assert fresh.get(eb.per_epoch + 3) == eb.get(eb.per_epoch + 3)  # a resumed run draws the same batch
    ranks = [EpochBatches(lengths, 10, seed=3, rank=r, world=2) for r in (0, 1)]
    assert ranks[0].per_epoch == 5 and not set(map(tuple, [ranks[0].get(k)[0] for k in range(5)])) & set(
        map(tuple, [ranks[1].get(k)[0] for k in range(5)]))
    with pytest.raises(ValueError):
        EpochBatches([], 4)
