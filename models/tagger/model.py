"""A BiLSTM tagger in one readable file (Lample et al. 2016; Ma & Hovy 2016; Plank et al. 2016's bilty):

    word ids -> word embedding ┐
    characters -> char embedding -> CNN -> max over the word ┴ joined -> dropout -> BiLSTM (run_padded: padding is
    never read) -> dropout -> linear layer: a score per tag at each word (the emissions)

and a head over the emissions: ``softmax`` picks each word's tag on its own (cross-entropy per word); ``crf`` scores
whole tag sequences with learned transitions between neighbouring tags (corpusforge.models.crf: the forward
algorithm for the loss, Viterbi for decoding).

A sentence, as the tagging objective hands it over, is ``(word ids, [character ids of each word])``; ``collate``
pads a batch of them to tensors, ``forward(words, chars, mask)`` gives the emissions (B, T, n_tags),
``tag_loss`` the summed loss and the number of words it is over, ``decode`` one tag id per word.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.crf import CRF
from corpusforge.models.objectives.base import IGNORE
from corpusforge.models.recurrent import run_padded
from corpusforge.models.tagger.config import TaggerConfig


class CharCNN(nn.Module):
    """Each word's vector from its characters: embedding, one convolution, max over the word's characters."""

    def __init__(self, n_chars: int, dim: int, filters: int, kernel: int):
        super().__init__()
        self.emb = nn.Embedding(n_chars, dim, padding_idx=0)
        self.conv = nn.Conv1d(dim, filters, kernel, padding=kernel // 2)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        """chars (B, T, C), 0 the padding -> (B, T, filters)."""
        B, T, C = chars.shape
        x = self.emb(chars.reshape(B * T, C)).transpose(1, 2)  # (B*T, dim, C)
        h = self.conv(x)[..., :C]  # an even kernel gives one position more
        pad = (chars.reshape(B * T, 1, C) == 0)
        h = h.masked_fill(pad, float("-inf")).amax(dim=2)
        return torch.nan_to_num(h, neginf=0.0).reshape(B, T, -1)  # a padding word (no character): zeros


class Tagger(nn.Module):
    HEAD = ("out.", "crf.")

    def __init__(self, cfg: TaggerConfig):
        super().__init__()
        if cfg.pad_id is None:
            raise ValueError("pad_id: a tagger pads its batches with the word vocabulary's pad id")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd, padding_idx=cfg.pad_id)
        self.chars = CharCNN(cfg.n_chars, cfg.char_embd, cfg.char_filters, cfg.char_kernel) if cfg.uses_chars else None
        width = cfg.n_embd + (cfg.char_filters if cfg.uses_chars else 0)
        self.rnn = nn.LSTM(width, cfg.n_hidden, num_layers=cfg.n_layer, batch_first=True, bidirectional=True,
                           dropout=cfg.dropout if cfg.n_layer > 1 else 0.0)
        self.drop = nn.Dropout(cfg.dropout)
        self.out = nn.Linear(2 * cfg.n_hidden, cfg.n_tags)
        self.crf = CRF(cfg.n_tags) if cfg.head == "crf" else None

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def collate(self, sentences: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]]) -> tuple[torch.Tensor, ...]:
        """Sentences (word ids, characters of each word) -> (words (B, T), chars (B, T, C), mask (B, T)), cut to
        max_len words and max_word_len characters; an empty sentence reads one pad word."""
        cfg = self.cfg
        cut = [(list(w)[: cfg.max_len], [list(c)[: cfg.max_word_len] for c in list(ch)[: cfg.max_len]])
               for w, ch in sentences]
        T = max(1, max(len(w) for w, _ in cut))
        C = max(1, max((len(c) for _, ch in cut for c in ch), default=1))
        words = torch.full((len(cut), T), cfg.pad_id, dtype=torch.long)
        chars = torch.zeros((len(cut), T, C), dtype=torch.long)
        mask = torch.zeros((len(cut), T), dtype=torch.bool)
        for b, (w, ch) in enumerate(cut):
            words[b, : len(w)] = torch.as_tensor(w, dtype=torch.long)
            mask[b, : max(1, len(w))] = True
            for t, c in enumerate(ch):
                if c:
                    chars[b, t, : len(c)] = torch.as_tensor(c, dtype=torch.long)
        return words, chars, mask

    def forward(self, words: torch.Tensor, chars: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """words (B, T), chars (B, T, C), mask (B, T) True on words -> emissions (B, T, n_tags)."""
        x = self.wte(words)
        if self.chars is not None:
            x = torch.cat([x, self.chars(chars)], dim=-1)
        x = self.drop(x)
        out, _ = run_padded(self.rnn, x, mask.sum(1))  # padding never read, at the padded kernel's speed
        return self.out(self.drop(out))

    def tag_loss(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(the loss summed over the batch's words, the number of words): the cross-entropy of each word's tag
        (softmax; words whose tag is IGNORE carry none), or the CRF's negative log-likelihood of each sentence's
        tag sequence (crf). The objective divides by the words of the whole step."""
        emissions = emissions.float()
        if self.crf is None:
            total = F.cross_entropy(emissions.reshape(-1, emissions.shape[-1]), tags.reshape(-1),
                                    ignore_index=IGNORE, reduction="sum")
            return total, int((tags != IGNORE).sum())
        return -self.crf.log_likelihood(emissions, tags, mask).sum(), int(mask.sum())

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """One tag id per word of each sentence: the argmax at each word (softmax) or the Viterbi path (crf)."""
        if self.crf is not None:
            return self.crf.decode(emissions.float(), mask)
        best = emissions.argmax(-1).tolist()
        return [row[:n] for row, n in zip(best, mask.sum(1).tolist())]
