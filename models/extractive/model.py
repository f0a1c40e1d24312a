"""An extractive summarizer in one readable file (SummaRuNNer-style: Nallapati, Zhai, Zhou 2017, without its
position and novelty terms): embedding -> a (Bi)LSTM over each sentence's real tokens, mean-pooled -> a (Bi)LSTM over
the document's real sentences -> a score per sentence from the sentence's vector and its place in the document.
Padding (tokens or whole sentences) is never read (corpusforge.models.recurrent)."""

from __future__ import annotations

import torch
import torch.nn as nn

from corpusforge.models.extractive.config import ExtractiveConfig
from corpusforge.models.pooling import pool
from corpusforge.models.recurrent import run_padded


class Extractive(nn.Module):
    def __init__(self, cfg: ExtractiveConfig):
        super().__init__()
        if cfg.pad_id is None:
            raise ValueError("pad_id: the summarizer pads its batches with the tokenizer's pad token (roles.pad)")
        self.cfg = cfg
        cell = nn.LSTM if cfg.cell == "lstm" else nn.GRU
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd, padding_idx=cfg.pad_id)
        self.drop = nn.Dropout(cfg.dropout)
        self.sentence_rnn = cell(cfg.n_embd, cfg.n_hidden, batch_first=True, bidirectional=True)
        self.document_rnn = cell(2 * cfg.n_hidden, cfg.n_doc_hidden, batch_first=True, bidirectional=True)
        self.scorer = nn.Sequential(nn.Linear(2 * cfg.n_hidden + 2 * cfg.n_doc_hidden, cfg.n_doc_hidden), nn.Tanh(),
                                    nn.Linear(cfg.n_doc_hidden, 1))

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def forward(self, ids: torch.Tensor, token_mask: torch.Tensor, sentence_mask: torch.Tensor) -> torch.Tensor:
        """ids and token_mask (B, S, T), sentence_mask (B, S), True on real ones -> a logit per sentence (B, S);
        a padding sentence's is -inf."""
        B, S, T = ids.shape
        real = sentence_mask.to(torch.bool)
        flat_ids, flat_mask = ids[real], token_mask[real].to(torch.bool)  # (N, T): the real sentences only
        lengths = flat_mask.sum(1).clamp(min=1)  # an empty sentence reads its one pad token
        flat_mask = flat_mask | (torch.arange(T, device=ids.device)[None, :] < lengths[:, None])
        out, _ = run_padded(self.sentence_rnn, self.drop(self.wte(flat_ids)), lengths)
        vectors = self.drop(pool(out, flat_mask, "mean"))  # (N, 2H)
        sentences = vectors.new_zeros(B, S, vectors.shape[-1])
        sentences[real] = vectors
        context, _ = run_padded(self.document_rnn, sentences, real.sum(1).clamp(min=1))
        logits = self.scorer(torch.cat([sentences, context], dim=-1)).squeeze(-1)
        return logits.masked_fill(~real, float("-inf"))

    def prepare(self, sentences: list[list[int]]) -> list[list[int]]:
        """A document's sentences as the model reads them: at most max_sentences, each cut to max_len tokens."""
        return [list(s)[: self.cfg.max_len] for s in sentences[: self.cfg.max_sentences]]
