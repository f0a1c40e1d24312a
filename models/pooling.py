"""One vector per sentence from an encoder's token states, as SBERT pools BERT's outputs (Reimers and Gurevych 2019):
``mean`` (the average of the real tokens' states; SBERT's default), ``max`` (the element-wise maximum over the real
tokens) or ``cls`` (the first token's state, where BERT puts ``[CLS]``). Padding never counts."""

from __future__ import annotations

from typing import Literal

import torch

Pooling = Literal["mean", "max", "cls"]
POOLINGS: tuple[str, ...] = ("mean", "max", "cls")


def pool(states: torch.Tensor, mask: torch.Tensor, strategy: Pooling = "mean") -> torch.Tensor:
    """``states`` (B, T, C) and ``mask`` (B, T), True on real tokens (left-aligned), -> (B, C). A sentence without a
    real token is a ValueError (it has no vector)."""
    if strategy not in POOLINGS:
        raise ValueError(f"pooling: one of {', '.join(POOLINGS)}, got {strategy!r}")
    if states.dim() != 3 or mask.shape != states.shape[:2]:
        raise ValueError(f"states (B, T, C) and mask (B, T): got {tuple(states.shape)} and {tuple(mask.shape)}")
    counts = mask.sum(1)
    if bool((counts == 0).any()):
        raise ValueError(f"sentence {int((counts == 0).nonzero()[0])} has no tokens to pool")
    if strategy == "cls":
        return states[:, 0]
    keep = mask.unsqueeze(-1)
    if strategy == "max":
        return states.masked_fill(~keep, float("-inf")).amax(1)
    return (states * keep).sum(1) / counts.unsqueeze(-1).to(states.dtype)
