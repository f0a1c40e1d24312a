"""A (bi)directional LSTM or GRU over right-padded batches, at the speed of torch's padded kernel, reading no padding.

Packing variable-length batches (``pack_padded_sequence``) makes torch's CPU LSTM leave its fused kernel for a loop
over time steps (issue 51 item 1: the BiLSTM classifier ran at 0.81x a plain padded loop). :func:`run_padded` runs
each direction of each layer as one padded call of the module's own weights instead: the forward direction reads
each row left to right (its padding comes after its last token, so no real position sees it), the backward
direction reads each row's real tokens reversed (padding still last) and its outputs are put back in place. The
outputs at real positions and the final states equal the packed run's (to float rounding: ~1e-7); the module and
its parameter names are nn.LSTM's / nn.GRU's own, so saved weights load as they are.
"""

from __future__ import annotations

import torch
import torch.nn as nn


def reversal_index(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """(B, T): position t of row i reads position lengths[i] - 1 - t when t < lengths[i], else t itself (padding
    stays where it is). Its own inverse."""
    t = torch.arange(T, device=lengths.device).unsqueeze(0)
    n = lengths.to(t.device).unsqueeze(1)
    return torch.where(t < n, n - 1 - t, t)


def _reverse(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def run_padded(rnn: nn.LSTM | nn.GRU, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``rnn`` (batch_first) over ``x`` (B, T, input) whose rows hold ``lengths`` real steps, then padding.
    Returns (outputs (B, T, H * directions) of the top layer, zero past each row's length; the top layer's final
    hidden states (directions, B, H): the forward one after each row's last real step, the backward one after its
    first)."""
    if not rnn.batch_first:
        raise ValueError("run_padded: the module must be batch_first")
    lstm = isinstance(rnn, nn.LSTM)
    op = torch.lstm if lstm else torch.gru
    B, T, _ = x.shape
    lengths = lengths.to(x.device).clamp(1, T)
    back = reversal_index(lengths, T) if rnn.bidirectional else None
    real = (torch.arange(T, device=x.device).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(-1)
    last = (lengths - 1).view(B, 1, 1)
    directions = ("", "_reverse") if rnn.bidirectional else ("",)
    for layer in range(rnn.num_layers):
        outs, finals = [], []
        for suffix in directions:
            names = [f"weight_ih_l{layer}{suffix}", f"weight_hh_l{layer}{suffix}"]
            if rnn.bias:
                names += [f"bias_ih_l{layer}{suffix}", f"bias_hh_l{layer}{suffix}"]
            weights = [getattr(rnn, name) for name in names]
            h0 = x.new_zeros(1, B, rnn.hidden_size)
            hx = (h0, h0) if lstm else h0
            inputs = _reverse(x, back) if suffix else x
            out = op(inputs, hx, weights, rnn.bias, 1, 0.0, rnn.training, False, True)[0]
            finals.append(out.gather(1, last.expand(-1, -1, out.shape[-1])).squeeze(1))
            outs.append(_reverse(out, back) if suffix else out)
        x = torch.cat(outs, dim=-1) if len(outs) > 1 else outs[0]
        if layer < rnn.num_layers - 1 and rnn.dropout > 0 and rnn.training:
            x = nn.functional.dropout(x, rnn.dropout, training=True)
    return x * real, torch.stack(finals)
