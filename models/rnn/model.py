"""Recurrent language models: Elman RNN, LSTM and GRU, in one readable file.

Two implementations of the same recurrence, chosen by ``RNNConfig.impl``:

- ``ours``: our own cells with every gate written out as the teaching texts draw them (a Python loop
  over time steps: slow, but every line is an equation);
- ``fused``: ``torch.nn.RNN`` / ``LSTM`` / ``GRU`` (cuDNN on GPU): the same maths, fast.

:func:`copy_fused_to_ours` loads a fused module's weights into our cells; the tests use it to show that
both compute the same outputs. One caveat, written down here on purpose: the teaching texts' GRU resets
*before* the recurrent matmul, ``tanh(U x + W (r * h))`` (Cho et al. 2014), while cuDNN/torch reset
*after* it, ``tanh(U x + r * (W h + b))``. ``GRUCell(reset="before")`` is the textbook form,
``reset="after"`` is torch's; only the latter can agree numerically with ``torch.nn.GRU``.

The LM carries its hidden state across batches (truncated BPTT: corpusforge.models.objectives.TruncatedBPTT
detaches it between batches). Dropout sits on the non-recurrent connections only (Zaremba et al. 2014). A bidirectional
stack is available as :class:`RNNEncoder` (for encoders, never for a left-to-right LM).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn as nn

from corpusforge.models.rnn.config import RNNConfig

State = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


# --- the cells: one time step each ------------------------------------------------------------------

class ElmanCell(nn.Module):
    """h_t = tanh(U x_t + W h_{t-1} + b)."""

    def __init__(self, n_in: int, n_hidden: int):
        super().__init__()
        self.U = nn.Linear(n_in, n_hidden)
        self.W = nn.Linear(n_hidden, n_hidden, bias=False)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.U(x) + self.W(h))


class LSTMCell(nn.Module):
    """Forget, input and output gates and the candidate, each a layer on [h_{t-1}, x_t]."""

    def __init__(self, n_in: int, n_hidden: int):
        super().__init__()
        self.W_f = nn.Linear(n_hidden + n_in, n_hidden)  # forget gate: what to erase from C
        self.W_i = nn.Linear(n_hidden + n_in, n_hidden)  # input gate: what to write into C
        self.W_C = nn.Linear(n_hidden + n_in, n_hidden)  # candidate values
        self.W_o = nn.Linear(n_hidden + n_in, n_hidden)  # output gate: what of C to show as h

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        h_prev, C_prev = state
        hx = torch.cat([h_prev, x], dim=-1)
        f = torch.sigmoid(self.W_f(hx))
        i = torch.sigmoid(self.W_i(hx))
        C_tilde = torch.tanh(self.W_C(hx))
        C = f * C_prev + i * C_tilde  # the "conveyor belt": dC_t/dC_{t-1} = f_t
        o = torch.sigmoid(self.W_o(hx))
        h = o * torch.tanh(C)
        return h, C


class GRUCell(nn.Module):
    """Reset gate r, update gate z, candidate h~; h_t = z * h_{t-1} + (1 - z) * h~."""

    def __init__(self, n_in: int, n_hidden: int, reset: Literal["after", "before"] = "after"):
        super().__init__()
        self.reset = reset
        self.U_r, self.W_r = nn.Linear(n_in, n_hidden), nn.Linear(n_hidden, n_hidden)
        self.U_z, self.W_z = nn.Linear(n_in, n_hidden), nn.Linear(n_hidden, n_hidden)
        self.U, self.W = nn.Linear(n_in, n_hidden), nn.Linear(n_hidden, n_hidden)

    def forward(self, x: torch.Tensor, h_prev: torch.Tensor) -> torch.Tensor:
        r = torch.sigmoid(self.U_r(x) + self.W_r(h_prev))
        z = torch.sigmoid(self.U_z(x) + self.W_z(h_prev))
        if self.reset == "before":  # textbook: tanh(U x + W (r * h) + b)
            h_tilde = torch.tanh(self.U(x) + self.W(r * h_prev))
        else:  # torch / cuDNN: tanh(U x + r * (W h + b))
            h_tilde = torch.tanh(self.U(x) + r * self.W(h_prev))
        return z * h_prev + (1 - z) * h_tilde  # z ~ 1 keeps the old state, z ~ 0 adopts the new


def make_cell(kind: str, n_in: int, n_hidden: int, gru_reset: str = "after") -> nn.Module:
    if kind == "rnn":
        return ElmanCell(n_in, n_hidden)
    if kind == "lstm":
        return LSTMCell(n_in, n_hidden)
    return GRUCell(n_in, n_hidden, reset=gru_reset)  # type: ignore[arg-type]


class OurRecurrentStack(nn.Module):
    """Our cells stacked like ``torch.nn.LSTM``: same input/output shapes and state layout
    ``(n_layer * directions, B, H)`` (for the LSTM, a pair (h, C)), batch_first."""

    def __init__(self, kind: str, n_in: int, n_hidden: int, n_layer: int, dropout: float = 0.0,
                 bidirectional: bool = False, gru_reset: str = "after"):
        super().__init__()
        self.kind, self.n_hidden, self.n_layer = kind, n_hidden, n_layer
        self.directions = 2 if bidirectional else 1
        self.cells = nn.ModuleList(
            make_cell(kind, n_in if layer == 0 else n_hidden * self.directions, n_hidden, gru_reset)
            for layer in range(n_layer) for _ in range(self.directions)
        )
        self.dropout = nn.Dropout(dropout)  # between layers, like torch's `dropout=`

    def forward(self, x: torch.Tensor, state: State | None = None):
        B, T, _ = x.shape
        if state is None:
            zeros = x.new_zeros(self.n_layer * self.directions, B, self.n_hidden)
            state = (zeros, zeros.clone()) if self.kind == "lstm" else zeros
        finals_h, finals_c = [], []
        for layer in range(self.n_layer):
            outputs = []
            for d in range(self.directions):
                k = layer * self.directions + d
                cell = self.cells[k]
                s = (state[0][k], state[1][k]) if self.kind == "lstm" else state[k]
                steps = range(T - 1, -1, -1) if d == 1 else range(T)  # the reverse direction reads right to left
                hs = [None] * T
                for t in steps:
                    s = cell(x[:, t], s)
                    hs[t] = s[0] if self.kind == "lstm" else s
                outputs.append(torch.stack(hs, dim=1))
                finals_h.append(s[0] if self.kind == "lstm" else s)
                if self.kind == "lstm":
                    finals_c.append(s[1])
            x = torch.cat(outputs, dim=-1)
            if layer < self.n_layer - 1:
                x = self.dropout(x)
        h = torch.stack(finals_h)
        return x, ((h, torch.stack(finals_c)) if self.kind == "lstm" else h)


def _bf16_autocast(device: str) -> bool:
    try:
        return torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) == torch.bfloat16
    except (TypeError, AttributeError):  # torch < 2.4: the CUDA-only forms
        return device == "cuda" and torch.is_autocast_enabled() and torch.get_autocast_gpu_dtype() == torch.bfloat16


class _Float32UnderBF16:
    """Runs the fused recurrence in float32 when bf16 autocast is on. cuDNN has no bf16 RNN: autocast casts its
    weights and inputs to float16 instead (seen on an H100, torch 2.11), and bf16 training has no loss scaler,
    so float16 gradients could underflow unnoticed. float32 (TF32) was also the faster there: a 2 x 650 LSTM
    over 35 x 20 tokens took 3.7 ms forward + backward against 4.9 ms in float16. The rest of the model (the
    head, the embedding) keeps bf16. Same parameters and state-dict names as the torch module it extends."""

    def forward(self, x, hx=None):
        device = x.device.type
        if not _bf16_autocast(device):
            return super().forward(x, hx)  # type: ignore[misc]
        with torch.autocast(device, enabled=False):
            if hx is not None:
                hx = tuple(h.float() for h in hx) if isinstance(hx, tuple) else hx.float()
            return super().forward(x.float(), hx)  # type: ignore[misc]


class FusedRNN(_Float32UnderBF16, nn.RNN):
    pass


class FusedLSTM(_Float32UnderBF16, nn.LSTM):
    pass


class FusedGRU(_Float32UnderBF16, nn.GRU):
    pass


def fused_stack(kind: str, n_in: int, n_hidden: int, n_layer: int, dropout: float = 0.0,
                bidirectional: bool = False) -> nn.Module:
    cls = {"rnn": FusedRNN, "lstm": FusedLSTM, "gru": FusedGRU}[kind]
    return cls(n_in, n_hidden, num_layers=n_layer, dropout=dropout if n_layer > 1 else 0.0,
               bidirectional=bidirectional, batch_first=True)


@torch.no_grad()
def copy_fused_to_ours(fused: nn.Module, ours: OurRecurrentStack) -> None:
    """Load torch.nn.RNN/LSTM/GRU weights into our cells (torch keeps two biases; we sum them where
    our equations have one)."""
    H = ours.n_hidden
    for layer in range(ours.n_layer):
        for d in range(ours.directions):
            sfx = f"l{layer}" + ("_reverse" if d == 1 else "")
            W_ih, W_hh = getattr(fused, f"weight_ih_{sfx}"), getattr(fused, f"weight_hh_{sfx}")
            b_ih, b_hh = getattr(fused, f"bias_ih_{sfx}"), getattr(fused, f"bias_hh_{sfx}")
            cell = ours.cells[layer * ours.directions + d]
            if ours.kind == "rnn":
                cell.U.weight.copy_(W_ih)
                cell.U.bias.copy_(b_ih + b_hh)
                cell.W.weight.copy_(W_hh)
            elif ours.kind == "lstm":  # torch's gate order: i, f, g (candidate), o
                for g, lin in enumerate((cell.W_i, cell.W_f, cell.W_C, cell.W_o)):
                    rows = slice(g * H, (g + 1) * H)
                    lin.weight.copy_(torch.cat([W_hh[rows], W_ih[rows]], dim=1))  # our input is [h, x]
                    lin.bias.copy_(b_ih[rows] + b_hh[rows])
            else:  # torch's gate order: r, z, n
                for g, (U, W) in enumerate(((cell.U_r, cell.W_r), (cell.U_z, cell.W_z), (cell.U, cell.W))):
                    rows = slice(g * H, (g + 1) * H)
                    U.weight.copy_(W_ih[rows])
                    U.bias.copy_(b_ih[rows])
                    W.weight.copy_(W_hh[rows])
                    W.bias.copy_(b_hh[rows])


# --- the models ----------------------------------------------------------------------------------

class RNNLM(nn.Module):
    """Embedding -> recurrent stack -> linear head; the state flows from one batch to the next."""

    def __init__(self, cfg: RNNConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        if cfg.impl == "fused":
            self.rnn = fused_stack(cfg.cell, cfg.n_embd, cfg.n_hidden, cfg.n_layer, cfg.dropout)
        else:
            self.rnn = OurRecurrentStack(cfg.cell, cfg.n_embd, cfg.n_hidden, cfg.n_layer, cfg.dropout,
                                         gru_reset=cfg.gru_reset)
        self.head = nn.Linear(cfg.n_hidden, cfg.vocab_size)
        if cfg.tie_weights:  # Press & Wolf 2017 / Inan et al. 2017
            self.head.weight = self.embedding.weight
        if cfg.init_range > 0:
            for p in self.parameters():
                nn.init.uniform_(p, -cfg.init_range, cfg.init_range)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, T: int | None = None) -> float:
        return 6.0 * (self.num_params() - self.embedding.weight.numel() * (0 if self.cfg.tie_weights else 1))

    def forward(self, idx: torch.Tensor, state: State | None = None, return_attention: bool = False):
        """idx (B, T) -> (logits (B, T, V), new state). Pass the returned state (detached) to the next batch."""
        x = self.drop(self.embedding(idx))
        out, state = self.rnn(x, state)
        return self.head(self.drop(out)), state


class RNNEncoder(nn.Module):
    """A (bi)directional recurrent encoder: every position sees the whole sequence, so it is no LM.
    Returns the outputs (B, T, H * directions) and the final state."""

    def __init__(self, cfg: RNNConfig, bidirectional: bool = True):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        if cfg.impl == "fused":
            self.rnn = fused_stack(cfg.cell, cfg.n_embd, cfg.n_hidden, cfg.n_layer, cfg.dropout, bidirectional)
        else:
            self.rnn = OurRecurrentStack(cfg.cell, cfg.n_embd, cfg.n_hidden, cfg.n_layer, cfg.dropout,
                                         bidirectional, cfg.gru_reset)

    def forward(self, idx: torch.Tensor, state: State | None = None):
        return self.rnn(self.drop(self.embedding(idx)), state)
