"""run_padded (issue 51 item 1): each direction of a (Bi)LSTM/GRU run over the padded batch gives what the packed run
gives (outputs at real positions, zeros past them, the top layer's final states), gradients included, and no
padding value reaches a real position."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from corpusforge.models.recurrent import reversal_index, run_padded


def packed(rnn, x, lengths):
    T = x.shape[1]
    p = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, hidden = rnn(p)
    out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T)
    h = hidden[0] if isinstance(hidden, tuple) else hidden
    return out, (h[-2:] if rnn.bidirectional else h[-1:])


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_the_padded_run_equals_the_packed_one(cell, layers, bidirectional):
    torch.manual_seed(0)
    rnn = cell(7, 5, num_layers=layers, batch_first=True, bidirectional=bidirectional)
    lengths = torch.tensor([6, 3, 1, 4, 6])
    x = torch.randn(5, 6, 7, requires_grad=True)
    out, finals = run_padded(rnn, x, lengths)
    ref_out, ref_finals = packed(rnn, x, lengths)
    assert out.shape == ref_out.shape and finals.shape == ref_finals.shape
    assert torch.allclose(out, ref_out, atol=1e-6) and torch.allclose(finals, ref_finals, atol=1e-6)
    weights = torch.randn_like(out)
    grads = torch.autograd.grad((out * weights).sum() + finals.sum(), [x, *rnn.parameters()])
    ref = torch.autograd.grad((ref_out * weights).sum() + ref_finals.sum(), [x, *rnn.parameters()])
    for a, b in zip(grads, ref, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_padding_never_reaches_a_real_position():
    torch.manual_seed(1)
    rnn = nn.LSTM(4, 3, batch_first=True, bidirectional=True)
    lengths = torch.tensor([2, 5, 3])
    x = torch.randn(3, 5, 4)
    poisoned = x.clone()
    for i, n in enumerate(lengths.tolist()):
        poisoned[i, n:] = 1e6
    a, fa = run_padded(rnn, x, lengths)
    b, fb = run_padded(rnn, poisoned, lengths)
    assert torch.equal(a, b) and torch.equal(fa, fb)
    assert a[0, 2:].abs().sum() == 0  # zeros past a row's length, as pad_packed_sequence gives


def test_the_reversal_index_reverses_real_steps_only_and_undoes_itself():
    index = reversal_index(torch.tensor([3, 1, 4]), 4)
    assert index.tolist() == [[2, 1, 0, 3], [0, 1, 2, 3], [3, 2, 1, 0]]
    assert torch.equal(index.gather(1, index), torch.arange(4).expand(3, 4))
