"""An RNN encoder-decoder (Sutskever et al. 2014, Cho et al. 2014), with or without attention, in one readable file.

The encoder reads the source with a (bidirectional) GRU or LSTM; packed sequences make it skip the padding, so
the backward direction starts at each sentence's real last token and the final states are those of the real ends.
The final states of both directions, side by side, are *bridged* to the decoder's first state:
``s_0 = tanh(W_bridge [h_fwd; h_bwd])`` per layer (Bahdanau et al. 2014 bridge the backward state alone; the
pytorch-seq2seq tutorials both, as here); an LSTM's memory cell gets its own linear bridge, unsquashed like the cell.

The decoder emits one token per step; ``config.attention`` chooses how it reads the source:

- ``none``: the fixed-vector bottleneck (Cho et al. 2014). The whole source is the top layer's final states
  ``c`` (both directions); every step reads ``[y_{t-1}; c]`` and predicts from ``[s_t; c; y_{t-1}]``.
  Long sentences must squeeze through that one vector: what attention removes.
- ``bahdanau`` (additive, Bahdanau et al. 2014): the same decoder, but ``c_t`` is recomputed at every step from the
  *previous* state: ``e_tj = v_a^T tanh(W_a s_{t-1} + U_a h_j)``, ``alpha_t = softmax(e_t)``,
  ``c_t = sum_j alpha_tj h_j``. ``U_a h_j`` does not change from step to step: it is computed once in ``encode``.
- ``luong-dot`` / ``luong-general`` (multiplicative, Luong et al. 2015, global attention): the RNN steps first;
  the *current* state ``s_t`` queries the source, ``score = s_t . h_j`` (dot) or ``s_t^T W_a h_j`` (general);
  ``h~_t = tanh(W_c [c_t; s_t])`` predicts the token and is fed to the next step's input ("input feeding").

Attention is :mod:`corpusforge.models.attention` (``additive_attention``, ``dot_attention``), masked so that it
never looks at a padded source position (their weights are exactly zero).

Training is teacher-forced: the decoder reads the true previous token. With ``teacher_forcing < 1``, each step
(for the whole batch) reads the model's own greedy guess instead with probability ``1 - teacher_forcing``; the draw
comes from torch's global generator, which the trainer seeds and saves in its checkpoints, so runs are reproducible
and resume exactly. Evaluation (``model.eval()``) is always teacher-forced.

The recurrence runs in float32 under autocast: cuDNN has no bf16 RNN (see corpusforge.models.rnn.model).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from corpusforge.models.attention import additive_attention, dot_attention
from corpusforge.models.seq2seq.config import Seq2SeqConfig


class Memory(NamedTuple):
    """What the encoder leaves the decoder; every tensor is batch first (beam search repeats them per beam)."""

    outputs: torch.Tensor  # (B, S, M): h_j, the encoder's state at each source position (zero on padding)
    keys: torch.Tensor | None  # (B, S, A): what a query is scored against (U_a h_j, W_a h_j or h_j); None: no attention
    summary: torch.Tensor  # (B, M): the top layer's final states, both directions: the no-attention model's c
    h0: torch.Tensor  # (B, L, H): the decoder's first state, bridged from the encoder's final states
    c0: torch.Tensor | None  # (B, L, H): an LSTM decoder's first memory cell


class DecoderState(NamedTuple):
    """What the decoder carries from one step to the next (decode_step's cache)."""

    hidden: torch.Tensor  # (L, B, H)
    cell: torch.Tensor | None  # (L, B, H), LSTM only
    feed: torch.Tensor | None  # (B, H): Luong's attentional vector h~_{t-1} (input feeding)


def recurrent(rnn: nn.Module, x, state):
    """``rnn(x, state)``, in float32 when autocast is on (cuDNN has no bf16 RNN; torch would fall back to float16)."""
    device = (x.data if isinstance(x, PackedSequence) else x).device.type
    if not torch.is_autocast_enabled(device):
        return rnn(x, state)
    with torch.autocast(device, enabled=False):
        if state is not None:
            state = tuple(s.float() for s in state) if isinstance(state, tuple) else state.float()
        return rnn(x.float(), state)


def rnn_class(cell: str) -> type:
    return {"gru": nn.GRU, "lstm": nn.LSTM}[cell]


class Encoder(nn.Module):
    """Embedding -> (bidirectional) recurrent stack over the packed source."""

    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.rnn = rnn_class(cfg.cell)(cfg.n_embd, cfg.n_hidden, num_layers=cfg.n_layer, batch_first=True,
                                       dropout=cfg.dropout if cfg.n_layer > 1 else 0.0,
                                       bidirectional=cfg.bidirectional)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor):
        """-> (outputs (B, S, M), final state(s) (L * directions, B, n_hidden))."""
        lengths = src_mask.sum(1).clamp_min(1).cpu()  # an empty source reads its one pad rather than nothing
        packed = pack_padded_sequence(self.drop(self.embedding(src)), lengths, batch_first=True, enforce_sorted=False)
        out, final = recurrent(self.rnn, packed, None)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        return out, final


class Decoder(nn.Module):
    """One step at a time: the previous token (and a context) in, the next token's logits out."""

    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.cfg = cfg
        E, M, H = cfg.n_embd, cfg.memory_width, cfg.decoder_width
        self.kind = cfg.attention
        self.luong = cfg.attention.startswith("luong")
        self.embedding = nn.Embedding(cfg.vocab_size, E)
        self.drop = nn.Dropout(cfg.dropout)
        if self.kind == "bahdanau":  # v_a^T tanh(W_a s_{t-1} + U_a h_j), attention size = decoder size
            self.W_a = nn.Linear(H, H, bias=False)
            self.U_a = nn.Linear(M, H, bias=False)
            self.v_a = nn.Parameter(torch.empty(H).uniform_(-H ** -0.5, H ** -0.5))
        elif self.kind == "luong-general":  # s_t^T W_a h_j
            self.W_a = nn.Linear(M, H, bias=False)
        if self.luong:
            self.W_c = nn.Linear(M + H, H)  # h~_t = tanh(W_c [c_t; s_t])
        n_in = E + (H if self.luong else M)  # the token, then h~_{t-1} (Luong) or the context c_t (the others)
        self.rnn = rnn_class(cfg.cell)(n_in, H, num_layers=cfg.n_layer, batch_first=True,
                                       dropout=cfg.dropout if cfg.n_layer > 1 else 0.0)
        self.head = nn.Linear(H if self.luong else H + M + E, cfg.vocab_size)

    def project_keys(self, outputs: torch.Tensor) -> torch.Tensor | None:
        """The part of every score that depends on the source alone, computed once per sentence."""
        if self.kind == "bahdanau":
            return self.U_a(outputs)
        if self.kind == "luong-general":
            return self.W_a(outputs)
        return outputs if self.kind == "luong-dot" else None

    def start(self, memory: Memory) -> DecoderState:
        hidden = memory.h0.transpose(0, 1).contiguous()
        cell = memory.c0.transpose(0, 1).contiguous() if memory.c0 is not None else None
        feed = hidden.new_zeros(hidden.shape[1:]) if self.luong else None
        return DecoderState(hidden, cell, feed)

    def _recur(self, x: torch.Tensor, state: DecoderState) -> tuple[torch.Tensor, DecoderState]:
        hx = (state.hidden, state.cell) if state.cell is not None else state.hidden
        out, hx = recurrent(self.rnn, x.unsqueeze(1), hx)
        hidden, cell = hx if isinstance(hx, tuple) else (hx, None)
        return out[:, 0], DecoderState(hidden, cell, state.feed)

    def step(self, y_prev: torch.Tensor, state: DecoderState, memory: Memory, src_mask: torch.Tensor):
        """y_prev (B,) -> (logits (B, V), new state, attention weights (B, S) or None)."""
        emb = self.drop(self.embedding(y_prev))
        mask = src_mask.unsqueeze(1)  # (B, 1, S): one query per sentence
        if self.luong:
            s_t, state = self._recur(torch.cat([emb, state.feed.to(emb.dtype)], dim=-1), state)
            context, weights = dot_attention(s_t.unsqueeze(1), memory.keys.to(s_t.dtype), memory.outputs, mask)
            attentional = torch.tanh(self.W_c(torch.cat([context[:, 0].to(s_t.dtype), s_t], dim=-1)))
            state = state._replace(feed=attentional)
            return self.head(self.drop(attentional)), state, weights[:, 0]
        if self.kind == "bahdanau":
            query = state.hidden[-1].unsqueeze(1)  # s_{t-1}: the top layer's previous state
            context, weights = additive_attention(query, memory.outputs, memory.outputs, self.W_a.weight,
                                                  self.U_a.weight, self.v_a, mask, projected_keys=memory.keys)
            context, weights = context[:, 0], weights[:, 0]
        else:  # no attention: the same fixed vector at every step
            context, weights = memory.summary, None
        context = context.to(emb.dtype)
        s_t, state = self._recur(torch.cat([emb, context], dim=-1), state)
        return self.head(self.drop(torch.cat([s_t, context, emb], dim=-1))), state, weights


class RNNSeq2Seq(nn.Module):
    """Encoder, bridge, decoder; the module API every ``translate`` family implements (see decoding.py)."""

    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.bridge = nn.Linear(cfg.memory_width, cfg.decoder_width)
        self.bridge_cell = nn.Linear(cfg.memory_width, cfg.decoder_width) if cfg.cell == "lstm" else None
        self.decoder = Decoder(cfg)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Memory:
        outputs, final = self.encoder(src, src_mask)
        h_n, c_n = final if isinstance(final, tuple) else (final, None)
        L, D, B = self.cfg.n_layer, 2 if self.cfg.bidirectional else 1, src.shape[0]

        def by_layer(s: torch.Tensor) -> torch.Tensor:  # (L * D, B, n) -> (L, B, D * n): [forward; backward]
            return s.view(L, D, B, -1).permute(0, 2, 1, 3).reshape(L, B, -1)

        h = by_layer(h_n)
        h0 = torch.tanh(self.bridge(h))
        c0 = self.bridge_cell(by_layer(c_n)) if c_n is not None else None
        return Memory(outputs, self.decoder.project_keys(outputs), h[-1], h0.transpose(0, 1),
                      c0.transpose(0, 1) if c0 is not None else None)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor,
                tgt_mask: torch.Tensor | None = None, return_attention: bool = False):
        """Teacher-forced pass: logits (B, T_tgt, V); with ``return_attention`` also the weights (B, T_tgt, T_src)
        (None without attention). ``tgt_mask`` is not needed: a padded step carries no loss and feeds only later
        padded steps."""
        memory = self.encode(src, src_mask)
        state = self.decoder.start(memory)
        own_guesses = self.training and self.cfg.teacher_forcing < 1.0
        logits_t, all_logits, all_weights = None, [], []
        for t in range(tgt_in.shape[1]):
            y = tgt_in[:, t]
            if own_guesses and t > 0 and torch.rand(()).item() >= self.cfg.teacher_forcing:
                y = logits_t.argmax(-1)  # the model's own greedy guess (no gradient flows through argmax)
            logits_t, state, weights = self.decoder.step(y, state, memory, src_mask)
            all_logits.append(logits_t)
            all_weights.append(weights)
        logits = torch.stack(all_logits, dim=1)
        if not return_attention:
            return logits
        return logits, (torch.stack(all_weights, dim=1) if all_weights[0] is not None else None)

    def decode_step(self, memory: Memory, src_mask: torch.Tensor, prev_ids: torch.Tensor,
                    cache: DecoderState | None = None, return_attention: bool = False):
        """The next token's logits (B, V) after ``prev_ids`` (B, t), the new state and the attention (B, 1, S) (None
        without attention). With ``cache=None`` the whole prefix is read; with a cache only its last token."""
        if cache is None:
            cache = self.decoder.start(memory)
            for t in range(prev_ids.shape[1] - 1):
                _, cache, _ = self.decoder.step(prev_ids[:, t], cache, memory, src_mask)
        logits, cache, weights = self.decoder.step(prev_ids[:, -1], cache, memory, src_mask)
        return logits, cache, (weights.unsqueeze(1) if weights is not None else None)

    def reorder_cache(self, cache: DecoderState, index: torch.Tensor) -> DecoderState:
        """Keep the rows ``index`` (beam search: each surviving hypothesis continues its parent's state)."""
        return DecoderState(cache.hidden.index_select(1, index),
                            cache.cell.index_select(1, index) if cache.cell is not None else None,
                            cache.feed.index_select(0, index) if cache.feed is not None else None)
