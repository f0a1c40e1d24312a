"""The encoder-decoder Transformer of "Attention is all you need" (Vaswani et al. 2017), in one readable file.

encoder: (token embedding * sqrt(d_model) + positions) -> N x [self-attention, feed-forward]
decoder: (token embedding * sqrt(d_model) + positions) -> N x [masked self-attention, cross-attention, feed-forward]
         -> linear head (the target embedding, transposed, by default) -> logits

- Encoder self-attention sees every real source token, never a padded one (the source mask on the keys).
- Decoder self-attention is causal: position t sees positions 0..t. Targets are padded on the right, so the causal
  mask already hides a row's padding from all its real positions (a padded position carries no loss), and the
  target mask is not needed.
- Cross-attention: every decoder position queries the encoder's whole output (the "context matrix"), masked by
  the source mask. An empty source attends to its one pad position instead (a softmax over nothing is NaN).
- Each sub-layer is wrapped in a residual connection and LayerNorm: ``post`` (the paper's "Add & Norm",
  ``LayerNorm(x + Dropout(sublayer(x)))``) or ``pre`` (``x + Dropout(sublayer(LayerNorm(x)))``, with a final
  LayerNorm after each stack; Xiong et al. 2020: trains without a long warmup).
- Positions: the paper's sinusoids (:func:`corpusforge.models.attention.sinusoidal_positions`) or learned ones.
- One embedding matrix for source and target (``share_embeddings``: one joint vocabulary, as the paper's shared
  BPE) and the output projection tied to the target embedding (``tie_output``).

Attention runs through ``F.scaled_dot_product_attention`` (fused kernels); asked for maps
(``return_attention=True``), it computes the weights explicitly with
:func:`corpusforge.models.attention.scaled_dot_product_attention` instead, as corpusforge.models.gpt does.

Decoding (corpusforge.models.decoding) calls ``encode`` once, then ``decode_step`` per token. The cache holds, per
decoder layer, the self-attention keys and values of every position decoded so far and the cross-attention keys
and values of the encoder output (projected once), so a new token costs one position, not the whole prefix.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.attention import causal_mask, scaled_dot_product_attention, sinusoidal_positions
from corpusforge.models.transformer.config import TransformerConfig

# per decoder layer: (self keys, self values, cross keys, cross values), each (B, n_head, positions, d_k)
Cache = tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], ...]


class MultiHeadAttention(nn.Module):
    """``MultiHead(Q, K, V) = Concat(head_1..head_h) W^O``, ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``; the
    keys and values are projected by :meth:`keys_values` apart from the queries, so a cache can keep them."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        d = cfg.d_model
        self.n_head, self.d_k, self.attention_dropout = cfg.n_head, d // cfg.n_head, cfg.attention_dropout
        self.W_q, self.W_k = nn.Linear(d, d, bias=cfg.bias), nn.Linear(d, d, bias=cfg.bias)
        self.W_v, self.W_o = nn.Linear(d, d, bias=cfg.bias), nn.Linear(d, d, bias=cfg.bias)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d_model) -> (B, n_head, T, d_k)."""
        B, T, _ = x.shape
        return x.view(B, T, self.n_head, self.d_k).transpose(1, 2)

    def keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.heads(self.W_k(x)), self.heads(self.W_v(x))

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                causal: bool = False, return_attention: bool = False):
        """Queries from ``x`` (B, T_q, d_model) over projected ``k``, ``v`` (B, n_head, T_k, d_k); ``mask`` is
        boolean, broadcastable to (B, n_head, T_q, T_k), True where a query may attend."""
        q = self.heads(self.W_q(x))
        weights = None
        if return_attention:  # the readable path: explicit weights, for heatmaps (no attention dropout)
            if causal:
                mask = causal_mask(q.shape[2], x.device)
            y, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        else:
            dropout = self.attention_dropout if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)
        B, _, T, _ = y.shape
        return self.W_o(y.transpose(1, 2).reshape(B, T, -1)), weights


class FeedForward(nn.Module):
    """``FFN(x) = max(0, x W_1 + b_1) W_2 + b_2``, applied to each position alike."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.W_1 = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.act = nn.ReLU() if cfg.activation == "relu" else nn.GELU()
        self.W_2 = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.W_2(self.act(self.W_1(x)))


class SubLayers(nn.Module):
    """The residual + LayerNorm wrapping shared by both layer kinds (``norm``: post or pre)."""

    def __init__(self, cfg: TransformerConfig, n: int):
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.norms = nn.ModuleList(nn.LayerNorm(cfg.d_model, bias=cfg.bias) for _ in range(n))
        self.drop = nn.Dropout(cfg.dropout)

    def input(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """What sub-layer i reads: LayerNorm(x) before it (pre-LN), x itself (post-LN)."""
        return self.norms[i](x) if self.pre else x

    def add(self, i: int, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The residual connection, then the norm after it (post-LN)."""
        x = x + self.drop(out)
        return x if self.pre else self.norms[i](x)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn, self.ff, self.sub = MultiHeadAttention(cfg), FeedForward(cfg), SubLayers(cfg, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.sub.input(0, x)
        x = self.sub.add(0, x, self.self_attn(h, *self.self_attn.keys_values(h), mask=mask)[0])
        return self.sub.add(1, x, self.ff(self.sub.input(1, x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn, self.cross_attn = MultiHeadAttention(cfg), MultiHeadAttention(cfg)
        self.ff, self.sub = FeedForward(cfg), SubLayers(cfg, 3)

    def forward(self, x: torch.Tensor, cross_kv: tuple[torch.Tensor, torch.Tensor], src_mask: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None = None, return_attention: bool = False):
        """``x`` (B, T_new, d_model): the positions to compute; ``past``: the self-attention keys and values of the
        positions before them (a cache; then T_new is 1 and that position sees them all), else causal over ``x``.
        Returns (x, the self-attention keys and values of every position so far, cross-attention weights or None)."""
        h = self.sub.input(0, x)
        k, v = self.self_attn.keys_values(h)
        if past is not None:
            if x.shape[1] != 1:
                raise ValueError("a cached decoder step computes one new position")
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        a, _ = self.self_attn(h, k, v, causal=past is None, return_attention=return_attention)
        x = self.sub.add(0, x, a)
        a, weights = self.cross_attn(self.sub.input(1, x), *cross_kv, mask=src_mask, return_attention=return_attention)
        x = self.sub.add(1, x, a)
        return self.sub.add(2, x, self.ff(self.sub.input(2, x))), (k, v), weights


def attendable(src_mask: torch.Tensor) -> torch.Tensor:
    """The source mask as keys: (B, S) -> (B, 1, 1, S); a row with no real token may attend to its first position."""
    empty = ~src_mask.any(dim=1, keepdim=True)
    first = torch.zeros_like(src_mask)
    first[:, 0] = True
    return (src_mask | (empty & first))[:, None, None, :]


class Transformer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.src_embed = nn.Embedding(cfg.vocab_size, d)
        self.tgt_embed = self.src_embed if cfg.share_embeddings else nn.Embedding(cfg.vocab_size, d)
        if cfg.positional == "learned":  # one table per side, as each side's positions mean different things
            self.src_pos, self.tgt_pos = nn.Embedding(cfg.max_len, d), nn.Embedding(cfg.max_len, d)
        else:
            self.register_buffer("pe", sinusoidal_positions(cfg.max_len, d), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_enc_layer))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_dec_layer))
        # post-LN layers already end in a LayerNorm; pre-LN stacks need one at their end
        self.enc_norm = nn.LayerNorm(d, bias=cfg.bias) if cfg.norm == "pre" else nn.Identity()
        self.dec_norm = nn.LayerNorm(d, bias=cfg.bias) if cfg.norm == "pre" else nn.Identity()
        self.head = nn.Linear(d, cfg.vocab_size, bias=False)
        for p in self.parameters():  # Glorot for every matrix (the Annotated Transformer's init) ...
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        tables = [self.src_embed] + ([] if cfg.share_embeddings else [self.tgt_embed])
        for table in tables:  # ... and N(0, d^-1/2) embeddings, so that sqrt(d) * e is ~N(0, 1)
            nn.init.normal_(table.weight, mean=0.0, std=d ** -0.5)
        if cfg.tie_output:
            self.head.weight = self.tgt_embed.weight

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, T: int | None = None) -> float:
        """Training FLOPs per target token, roughly: 6 per weight of every matrix multiply (the source of about the
        same length runs through the encoder once per target token; the attention scores are left out)."""
        tables = [self.src_embed, self.tgt_embed] + ([self.src_pos, self.tgt_pos] if self.cfg.positional == "learned" else [])
        lookups = {id(t.weight) for t in tables} - {id(self.head.weight)}  # a table lookup is no multiply
        return 6.0 * sum(p.numel() for p in self.parameters() if id(p) not in lookups and p.dim() > 1)

    def embed(self, ids: torch.Tensor, table: nn.Embedding, side: str, offset: int = 0) -> torch.Tensor:
        """Token embeddings scaled by sqrt(d_model) (the paper, 3.4) plus positions offset..offset+T-1."""
        T = ids.shape[1]
        if offset + T > self.cfg.max_len:
            raise ValueError(f"a sequence of {offset + T} tokens is longer than max_len {self.cfg.max_len}")
        x = table(ids) * math.sqrt(self.cfg.d_model)
        positions = torch.arange(offset, offset + T, device=ids.device)
        if self.cfg.positional == "learned":
            x = x + (self.src_pos if side == "src" else self.tgt_pos)(positions)
        else:
            x = x + self.pe[positions].to(x.dtype)
        return self.drop(x)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """-> memory (B, S, d_model), the encoder's output that every decoder layer attends to."""
        mask = attendable(src_mask)
        x = self.embed(src, self.src_embed, "src")
        for layer in self.encoder_layers:
            x = layer(x, mask)
        return self.enc_norm(x)

    def _decode(self, ids: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor, cache: Cache | None = None,
                offset: int = 0, return_attention: bool = False):
        """The decoder over ``ids`` (positions offset..): (logits, the cache with these positions, cross maps)."""
        mask = attendable(src_mask)
        x = self.embed(ids, self.tgt_embed, "tgt", offset)
        new_cache, maps = [], []
        for i, layer in enumerate(self.decoder_layers):
            if cache is None:
                past, cross = None, layer.cross_attn.keys_values(memory)  # projected once per sentence
            else:
                past, cross = cache[i][:2], cache[i][2:]
            x, (k, v), weights = layer(x, cross, mask, past, return_attention)
            new_cache.append((k, v, *cross))
            maps.append(weights)
        return self.head(self.dec_norm(x)), tuple(new_cache), maps

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor,
                tgt_mask: torch.Tensor | None = None, return_attention: bool = False):
        """Teacher-forced pass: logits (B, T_tgt, V); with ``return_attention`` also the cross-attention maps, one
        (B, n_head, T_tgt, T_src) per decoder layer."""
        memory = self.encode(src, src_mask)
        logits, _, maps = self._decode(tgt_in, memory, src_mask, return_attention=return_attention)
        return (logits, maps) if return_attention else logits

    def decode_step(self, memory: torch.Tensor, src_mask: torch.Tensor, prev_ids: torch.Tensor,
                    cache: Cache | None = None, return_attention: bool = False):
        """The next token's logits (B, V) after ``prev_ids`` (B, t), the cache, and the last layer's
        cross-attention of the new position (B, n_head, S) when asked. ``cache=None`` computes the whole prefix
        (and returns its cache); with a cache only the last token is new: one position of work per layer."""
        if cache is None:
            logits, cache, maps = self._decode(prev_ids, memory, src_mask, return_attention=return_attention)
        else:
            logits, cache, maps = self._decode(prev_ids[:, -1:], memory, src_mask, cache, prev_ids.shape[1] - 1,
                                               return_attention)
        return logits[:, -1], cache, (maps[-1][:, :, -1] if return_attention else None)

    def reorder_cache(self, cache: Cache, index: torch.Tensor) -> Cache:
        """Keep the rows ``index`` of the self-attention keys and values (beam search: each hypothesis continues
        its parent's). ``index`` moves rows only among the beams of one source (the decoding contract), whose
        cross-attention keys and values are the same: those are kept as they are, not copied (issue 51 item 3)."""
        return tuple((k.index_select(0, index), v.index_select(0, index), *cross) for k, v, *cross in cache)
