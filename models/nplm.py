"""Bengio et al. (2003), "A Neural Probabilistic Language Model", in one readable file.

For each position t the previous ``context`` tokens are looked up in the shared embedding table C,
concatenated into x, passed through ``h = tanh(H x + d)`` and scored ``y = b + W x + U h`` (W x is the
paper's optional direct connection), then softmax. Like an n-gram model it sees a fixed window; unlike
one, similar words share statistical strength through their embeddings.

The forward pass takes a whole (B, T) block and predicts every position at once, so the trainer and the
sampler treat it exactly like the other LMs. Positions with fewer than ``context`` predecessors see a
padding id (``vocab_size``), which has its own embedding row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class NPLMConfig:
    """Shape of a Bengio neural probabilistic LM."""

    vocab_size: int = field(default=10000, metadata={"doc": "Number of token ids (set from the tokenizer)."})
    context: int = field(default=5, metadata={"doc": "Context words n-1 (the paper's best PTB-sized runs use 4-5)."})
    n_embd: int = field(default=60, metadata={"doc": "Embedding size m."})
    n_hidden: int = field(default=100, metadata={"doc": "Hidden tanh units h."})
    direct: bool = field(default=True, metadata={"doc": "The direct connection W x from embeddings to outputs."})
    dropout: float = field(default=0.0, metadata={"doc": "Dropout on the concatenated embeddings and the hidden layer."})
    block_size: int = field(default=64, metadata={"doc": "Positions per training sequence (predictions still see only `context`)."})

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context", "n_embd", "n_hidden", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: must be in [0, 1), got {self.dropout}")


class NPLM(nn.Module):
    stateful = False

    def __init__(self, cfg: NPLMConfig):
        super().__init__()
        self.cfg = cfg
        self.pad_id = cfg.vocab_size
        self.C = nn.Embedding(cfg.vocab_size + 1, cfg.n_embd)  # +1: the padding row
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
