"""A GPT-style decoder-only Transformer, in one readable file (after nanoGPT).

token embedding (+ positions) -> n_layer x [causal multi-head self-attention, MLP], each wrapped in a
residual connection and LayerNorm -> LayerNorm -> linear head (tied to the token embedding by default).

Choices, all in :class:`GPTConfig`:
- positions: ``learned`` (GPT-2), ``sinusoidal`` (Vaswani 2017, added to the input), ``rope`` (rotary,
  Su et al. 2021: rotates q and k, so scores depend on relative offsets) or ``alibi`` (Press et al. 2021:
  no position vectors; a per-head linear penalty on distance is added to the scores);
- ``pre`` LayerNorm (GPT-2; trains stably without warmup tricks) or ``post`` (the 2017 paper's Add & Norm);
- GELU or ReLU in the feed-forward block; weight tying between the embedding and the output head.

Attention runs through ``F.scaled_dot_product_attention`` (flash / memory-efficient kernels on GPU).
``forward(idx, return_attention=True)`` instead computes the weights explicitly with
:func:`corpusforge.models.attention.scaled_dot_product_attention`, for inspection.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.attention import causal_mask, scaled_dot_product_attention, sinusoidal_positions
from corpusforge.models.gpt.config import GPTConfig


def alibi_slopes(n_head: int) -> torch.Tensor:
    """Per-head slopes 2^(-8h/n) (Press et al.); for n not a power of two, interleave the next power's."""
    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_head).is_integer():
        return torch.tensor(power_of_two(n_head))
    closest = 2 ** math.floor(math.log2(n_head))
    extra = power_of_two(2 * closest)[0::2][: n_head - closest]
    return torch.tensor(power_of_two(closest) + extra)


def alibi_bias(n_head: int, T: int, causal: bool = True) -> torch.Tensor:
    """``(n_head, T, T)`` additive scores: -slope * (i - j) on and below the diagonal, -inf above it;
    without ``causal`` (an encoder) -slope * |i - j| everywhere."""
    pos = torch.arange(T)
    distance = (pos.view(-1, 1) - pos.view(1, -1)).float()  # i - j
    bias = -alibi_slopes(n_head).view(-1, 1, 1) * distance.abs()
    return bias.masked_fill(~causal_mask(T), float("-inf")) if causal else bias


def rope_tables(T: int, head_size: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / base ** (torch.arange(0, head_size, 2, dtype=torch.float32) / head_size)
    angles = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)  # (T, hs/2)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (even, odd) pair of channels of x (B, nh, T, hs) by its position's angle."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention; causal unless built with ``causal=False`` (corpusforge.models.encoder)."""

    def __init__(self, cfg: GPTConfig, causal: bool = True):
        super().__init__()
        self.cfg, self.causal = cfg, causal
        self.n_head, self.head_size = cfg.n_head, cfg.n_embd // cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)  # q, k, v in one matmul
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.attn_dropout, self.resid_dropout = cfg.dropout, nn.Dropout(cfg.dropout)
        if cfg.positional == "rope":
            cos, sin = rope_tables(cfg.block_size, self.head_size, cfg.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        if cfg.positional == "alibi":
            self.register_buffer("alibi", alibi_bias(cfg.n_head, cfg.block_size, causal), persistent=False)

    def forward(self, x: torch.Tensor, return_attention: bool = False, key_mask: torch.Tensor | None = None):
        """``key_mask`` (B, T), True on real tokens: padded keys get no attention (an encoder reading padded
        batches; None: every key is real)."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, self.head_size).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        if self.cfg.positional == "rope":
            q, k = apply_rope(q, self.rope_cos[:T], self.rope_sin[:T]), apply_rope(k, self.rope_cos[:T], self.rope_sin[:T])
        weights = None
        keys = key_mask[:, None, None, :].to(torch.bool) if key_mask is not None else None  # (B, 1, 1, T)
        if return_attention:  # the readable path: explicit weights for heatmaps
            if self.cfg.positional == "alibi":
                scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_size) + self.alibi[:, :T, :T]
                if keys is not None:
                    scores = scores.masked_fill(~keys, float("-inf"))
                weights = torch.softmax(scores, dim=-1)
                y = weights @ v
            else:
                mask = causal_mask(T, x.device) if self.causal else None
                if keys is not None:
                    mask = keys if mask is None else (mask & keys)
                y, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        else:
            dropout = self.attn_dropout if self.training else 0.0
            if self.cfg.positional == "alibi":
                bias = self.alibi[:, :T, :T].to(q.dtype)
                if keys is not None:
                    bias = bias.masked_fill(~keys, float("-inf"))
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout)
            elif keys is not None:
                if self.causal:
                    keys = keys & causal_mask(T, x.device)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=keys, dropout_p=dropout)
            else:
                y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=self.causal)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again
        return self.resid_dropout(self.c_proj(y)), weights


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.act = nn.GELU() if cfg.activation == "gelu" else nn.ReLU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, causal: bool = True):
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg, causal)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, return_attention: bool = False, key_mask: torch.Tensor | None = None):
        if self.pre:  # x + f(LN(x)): the residual stream itself is never normalised
            a, w = self.attn(self.ln_1(x), return_attention, key_mask)
            x = x + a
            return x + self.mlp(self.ln_2(x)), w
        a, w = self.attn(x, return_attention, key_mask)  # LN(x + f(x)): "Add & Norm" as drawn in the 2017 paper
        x = self.ln_1(x + a)
        return self.ln_2(x + self.mlp(x)), w


def add_stack(module: nn.Module, cfg: GPTConfig, causal: bool, segments: int = 0) -> None:
    """Give ``module`` a Transformer stack's parts, in this order: ``wte`` (token embedding), the positions
    (``wpe`` learned, ``pe`` sinusoidal; rope and alibi live in the attention), ``segments`` > 0: ``wtt`` (BERT's
    segment embeddings), ``drop``, ``blocks`` and ``ln_f`` (post-LN blocks already end in a LayerNorm: Identity).
    :func:`run_blocks` runs them."""
    module.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
    if cfg.positional == "learned":
        module.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
    elif cfg.positional == "sinusoidal":
        module.register_buffer("pe", sinusoidal_positions(cfg.block_size, cfg.n_embd), persistent=False)
    if segments:
        module.wtt = nn.Embedding(segments, cfg.n_embd)
    module.drop = nn.Dropout(cfg.dropout)
    module.blocks = nn.ModuleList(Block(cfg, causal) for _ in range(cfg.n_layer))
    module.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias) if cfg.norm == "pre" else nn.Identity()


def init_weights(module: nn.Module) -> None:
    """GPT-2's init: N(0, 0.02) for Linear and Embedding weights, zero biases (``module.apply(init_weights)``)."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)


def scale_residual_projections(module: nn.Module, n_layer: int) -> None:
    """GPT-2: each block's output projections (``c_proj``) drawn with std 0.02 / sqrt(2 * n_layer)."""
    for name, p in module.named_parameters():
        if name.endswith("c_proj.weight"):
            nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig, causal: bool = True):
        """``causal=False`` (every position sees every other) is for corpusforge.models.encoder."""
        super().__init__()
        self.cfg = cfg
        add_stack(self, cfg, causal)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.lm_head.weight = self.wte.weight
        self.apply(init_weights)
        scale_residual_projections(self, cfg.n_layer)  # GPT-2: residual projections scaled by depth

    _init_weights = staticmethod(init_weights)

    def num_params(self, non_embedding: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and self.cfg.positional == "learned":
            n -= self.wpe.weight.numel()
        return n

    def flops_per_token(self, T: int | None = None) -> float:
        """Training FLOPs per token: 6N for the matmuls plus 12*L*C*T for attention (PaLM appendix B)."""
        c = self.cfg
        return 6 * self.num_params() + 12 * c.n_layer * c.n_embd * (T or c.block_size)

    def forward(self, idx: torch.Tensor, state=None, return_attention: bool = False):
        """idx (B, T) -> (logits (B, T, V), state=None); with return_attention: (logits, [(B, nh, T, T)] per layer)."""
        x, maps = self._blocks(idx, return_attention)
        logits = self.lm_head(self.ln_f(x))
        return (logits, maps) if return_attention else (logits, None)

    def hidden_states(self, idx: torch.Tensor) -> torch.Tensor:
        """idx (B, T) -> the last layer's states after the final norm (B, T, n_embd): what the head reads, one
        contextual vector per token (an encoder's see both sides; a causal model's only the left)."""
        return self.ln_f(self._blocks(idx, False)[0])

    def _blocks(self, idx: torch.Tensor, return_attention: bool) -> tuple[torch.Tensor, list]:
        """The blocks' output (B, T, C) before the final norm, and each block's attention map (or None)."""
        return run_blocks(self, idx, return_attention)


def run_blocks(body: nn.Module, idx: torch.Tensor, return_attention: bool, key_mask: torch.Tensor | None = None,
               added: torch.Tensor | None = None) -> tuple[torch.Tensor, list]:
    """A stack's output (B, T, C) before its final norm, and each block's attention map (or None): token (+
    position) embeddings of ``body`` (``wte``, ``wpe`` or ``pe``, ``drop``, ``blocks``, ``cfg``) through its blocks.
    ``key_mask`` (B, T): True on real tokens, padding is never attended to; ``added`` (B, T, C): more input
    embeddings summed with the token and position ones (BERT's segments: corpusforge.models.bert.model.BertBody)."""
    B, T = idx.shape
    if T > body.cfg.block_size:
        raise ValueError(f"sequence of {T} tokens is longer than block_size {body.cfg.block_size}")
    x = body.wte(idx)
    if added is not None:
        x = x + added
    if body.cfg.positional == "learned":
        x = x + body.wpe(torch.arange(T, device=idx.device))
    elif body.cfg.positional == "sinusoidal":
        x = x + body.pe[:T].to(x.dtype)
    x = body.drop(x)
    maps = []
    for block in body.blocks:
        x, w = block(x, return_attention, key_mask)
        maps.append(w)
    return x, maps
