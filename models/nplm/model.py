"""Bengio et al. (2003), "A Neural Probabilistic Language Model", in one readable file.

For each position t the previous ``context`` tokens are looked up in the shared embedding table C,
concatenated into x, passed through ``h = tanh(H x + d)`` and scored ``y = b + W x + U h`` (W x is the
paper's optional direct connection), then softmax. Like an n-gram model it sees a fixed window; unlike
one, similar words share statistical strength through their embeddings.

The forward pass takes a whole (B, T) block and predicts every position at once, so the trainer and the
sampler treat it exactly like the other LMs. Positions with fewer than ``context`` predecessors see the
tokenizer's padding id (``cfg.pad_id``: its pad token, else its end-of-text token, which is what comes before a
document in the token stream).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.nplm.config import NPLMConfig


class NPLM(nn.Module):
    def __init__(self, cfg: NPLMConfig):
        super().__init__()
        self.cfg = cfg
        self.pad_id = cfg.pad_id
        self.C = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        n_x = cfg.context * cfg.n_embd
        self.H = nn.Linear(n_x, cfg.n_hidden)  # bias = the paper's d
        self.U = nn.Linear(cfg.n_hidden, cfg.vocab_size)  # bias = the paper's b
        self.W = nn.Linear(n_x, cfg.vocab_size, bias=False) if cfg.direct else None
        self.drop = nn.Dropout(cfg.dropout)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, T: int | None = None) -> float:
        return 6.0 * (self.num_params() - self.C.weight.numel())

    def contexts(self, idx: torch.Tensor) -> torch.Tensor:
        """(B, T) -> (B, T, context): row t holds tokens t-context+1 .. t (padded on the left)."""
        padded = F.pad(idx, (self.cfg.context - 1, 0), value=self.pad_id)
        return padded.unfold(1, self.cfg.context, 1)

    def forward(self, idx: torch.Tensor, state=None, return_attention: bool = False):
        """idx (B, T) -> (logits (B, T, V) where logits[:, t] scores token t+1, None)."""
        B, T = idx.shape
        x = self.drop(self.C(self.contexts(idx)).reshape(B, T, -1))  # concatenated context embeddings
        h = self.drop(torch.tanh(self.H(x)))
        y = self.U(h)
        if self.W is not None:
            y = y + self.W(x)
        return y, None
