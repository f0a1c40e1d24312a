"""BERT (Devlin et al. 2019) in one readable file: the encoder's blocks (corpusforge.models.gpt without the causal
mask) over token + position + *segment* embeddings, a padding mask so that batches of sentences of different lengths
attend to real tokens only, and the heads of pre-training kept apart from the body:

- ``encode(ids, segments, key_mask)`` -> the last layer's states (B, T, C): one contextual vector per token;
- ``lm_head`` (tied to the token embedding) reads every state: the masked-LM logits;
- ``pooler`` (dense + tanh) reads the ``[CLS]`` state, and ``nsp_head`` turns it into IsNext/NotNext logits.

Its input is ``[CLS] A [SEP] B [SEP]``: segment 0 for ``[CLS] A [SEP]``, 1 for ``B [SEP]``; the objective that
builds it and masks it is corpusforge.models.objectives.BertPretraining. ``forward(ids)`` gives the masked-LM
logits of one segment, so the lm stage's inspection (attention maps, what fills a ``[MASK]``) works unchanged.
Fine-tuning for classification is corpusforge.models.bert_classifier, whose parameter names match these (the
body, ``pooler``), so a pre-trained checkpoint loads into it by name.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from corpusforge.models.gpt.model import GPT


class Bert(GPT):
    pretrains = True  # the masked-LM and NSP heads; a fine-tuned subclass replaces them

    def __init__(self, cfg):
        if self.pretrains and getattr(cfg, "mask_id", None) is None:
            raise ValueError("mask_id: BERT pre-training needs the tokenizer's mask token (tokenizer.roles.mask)")
        super().__init__(cfg, causal=False)
        self.wtt = nn.Embedding(cfg.type_vocab_size, cfg.n_embd)  # segment (token type) embeddings
        nn.init.normal_(self.wtt.weight, mean=0.0, std=0.02)
        if getattr(cfg, "nsp", False):
            self.pooler = nn.Linear(cfg.n_embd, cfg.n_embd)
            self.nsp_head = nn.Linear(cfg.n_embd, 2)
            for layer in (self.pooler, self.nsp_head):
                self._init_weights(layer)

    @property
    def mask_id(self) -> int:
        return self.cfg.mask_id

    def encode(self, idx: torch.Tensor, segments: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
               return_attention: bool = False) -> tuple[torch.Tensor, list]:
        """(states (B, T, C) after the final norm, attention maps or Nones). ``segments`` (B, T): 0 or 1 (None: all
        0); ``key_mask`` (B, T): True on real tokens (None: no padding)."""
        if segments is None:
            segments = torch.zeros_like(idx)
        x, maps = self._blocks(idx, return_attention, key_mask, added=self.wtt(segments))
        return self.ln_f(x), maps

    def forward(self, idx: torch.Tensor, state=None, return_attention: bool = False,
                segments: torch.Tensor | None = None, key_mask: torch.Tensor | None = None):
        """idx (B, T) -> (masked-LM logits (B, T, V), None or the attention maps), as an encoder lm answers."""
        states, maps = self.encode(idx, segments, key_mask, return_attention)
        logits = self.lm_head(states)
        return (logits, maps) if return_attention else (logits, None)

    def hidden_states(self, idx: torch.Tensor, segments: torch.Tensor | None = None,
                      key_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.encode(idx, segments, key_mask)[0]

    def pooled(self, states: torch.Tensor) -> torch.Tensor:
        """BERT's pooler: tanh(W h_[CLS] + b), the vector the sentence-level heads read."""
        return torch.tanh(self.pooler(states[:, 0]))

    def pretrain(self, idx: torch.Tensor, segments: torch.Tensor, key_mask: torch.Tensor):
        """(masked-LM logits (B, T, V), next-sentence logits (B, 2) or None without NSP)."""
        states, _ = self.encode(idx, segments, key_mask)
        nsp = self.nsp_head(self.pooled(states)) if getattr(self.cfg, "nsp", False) else None
        return self.lm_head(states), nsp
