"""Attention as small pure functions, in the order the teaching texts introduce them.

Every function takes a query (or queries), keys and values and returns ``(context, weights)``:

- :func:`additive_attention` (Bahdanau 2014): ``e_j = v_a^T tanh(W_a q + U_a k_j)``;
- :func:`dot_attention` (Luong 2015): ``e_j = q . k_j``;
- :func:`scaled_dot_product_attention` (Vaswani 2017): ``e_j = q . k_j / sqrt(d_k)``.

then ``alpha = softmax(e)`` and ``context = sum_j alpha_j v_j``. A ``mask`` is boolean and broadcastable to
the score shape ``(..., n_queries, n_keys)``: True means "may attend", False positions get zero weight.
The GPT model uses ``torch.nn.functional.scaled_dot_product_attention`` (flash/SDPA kernels) for speed;
these readable versions are the reference it is tested against and what ``lm inspect`` draws.

Also here: the sinusoidal positional encoding and the causal mask, which both belong to attention.
"""

from __future__ import annotations

import math

import torch


def _attend(scores: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    if mask is not None:
        scores = scores.masked_fill(~mask.to(torch.bool), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:  # a query whose every key is masked gets all-zero weights, not NaN
        weights = torch.nan_to_num(weights, nan=0.0)
    return weights @ values, weights


def additive_attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    W_a: torch.Tensor,
    U_a: torch.Tensor,
    v_a: torch.Tensor,
    mask: torch.Tensor | None = None,
    projected_keys: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bahdanau attention. query ``(..., n_q, d_q)``, keys ``(..., n_k, d_k)``, values ``(..., n_k, d_v)``;
    ``W_a (d_a, d_q)``, ``U_a (d_a, d_k)``, ``v_a (d_a,)`` as in ``v_a^T tanh(W_a q + U_a h_j)``.
    ``projected_keys`` (``U_a h_j``, ``(..., n_k, d_a)``) may be passed by a decoder that attends at every step:
    the keys stay the same from step to step, so their projection is computed once per source sentence."""
    projected_q = query @ W_a.T  # (..., n_q, d_a)
    projected_k = keys @ U_a.T if projected_keys is None else projected_keys  # (..., n_k, d_a)
    # every (query, key) pair: broadcast to (..., n_q, n_k, d_a) before the tanh
    energy = torch.tanh(projected_q.unsqueeze(-2) + projected_k.unsqueeze(-3)) @ v_a
    return _attend(energy, values, mask)


def dot_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Luong (dot) attention: scores are plain dot products ``q . k_j``."""
    return _attend(query @ keys.transpose(-2, -1), values, mask)


def scaled_dot_product_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(Q K^T / sqrt(d_k)) V``: the scaling keeps the softmax out of its flat, tiny-gradient regions."""
    d_k = query.shape[-1]
    return _attend(query @ keys.transpose(-2, -1) / math.sqrt(d_k), values, mask)


def causal_mask(n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``(n, n)`` boolean, True on and below the diagonal: position t sees positions 0..t only."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def sinusoidal_positions(n_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """``PE[pos, 2i] = sin(pos / base^(2i/d))``, ``PE[pos, 2i+1] = cos(pos / base^(2i/d))``; shape (n, d)."""
    pos = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / base ** (two_i / d_model)
    pe = torch.zeros(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.to(torch.get_default_dtype())
