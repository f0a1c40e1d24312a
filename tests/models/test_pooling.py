"""Sentence pooling (corpusforge.models.pooling) against a hand computation, and padding that never counts."""

from __future__ import annotations

import pytest
import torch

from corpusforge.models.pooling import pool

# two sentences: three real tokens, and one real token then two padded positions (whose states are junk)
STATES = torch.tensor([[[1.0, 2.0], [3.0, -4.0], [5.0, 0.0]],
                       [[-1.0, 7.0], [100.0, 100.0], [-100.0, -100.0]]])
MASK = torch.tensor([[True, True, True], [True, False, False]])


def test_mean_max_and_cls_by_hand():
    torch.testing.assert_close(pool(STATES, MASK, "mean"), torch.tensor([[3.0, -2.0 / 3.0], [-1.0, 7.0]]),
                               rtol=0, atol=1e-7)  # (1+3+5)/3, (2-4+0)/3
    assert pool(STATES, MASK, "max").tolist() == [[5.0, 2.0], [-1.0, 7.0]]
    assert pool(STATES, MASK, "cls").tolist() == [[1.0, 2.0], [-1.0, 7.0]]


@pytest.mark.parametrize("strategy", ["mean", "max", "cls"])
def test_padding_never_counts(strategy):
    junk = STATES.clone()
    junk[1, 1:] = torch.randn(2, 2) * 1e6
    assert torch.equal(pool(junk, MASK, strategy), pool(STATES, MASK, strategy))
    # the second sentence alone, unpadded, gives the same vector
    assert torch.equal(pool(STATES[1:, :1], MASK[1:, :1], strategy), pool(STATES, MASK, strategy)[1:])


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="pooling: one of mean, max, cls"):
        pool(STATES, MASK, "sum")
    with pytest.raises(ValueError, match="sentence 1 has no tokens"):
        pool(STATES, torch.tensor([[True, True, True], [False, False, False]]))
    with pytest.raises(ValueError, match=r"states \(B, T, C\)"):
        pool(STATES[0], MASK)
