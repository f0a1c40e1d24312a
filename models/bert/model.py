"""BERT (Devlin et al. 2019) in one readable file: a body and the heads that read it, kept apart.

- :class:`BertBody`, the encoder: token + position + *segment* embeddings through the Transformer blocks of
  corpusforge.models.gpt without the causal mask, with a padding mask so that batches of sentences of different
  lengths attend to real tokens only, and a final norm. ``body(ids, segments, key_mask)`` -> the last layer's states
  (B, T, C): one contextual vector per token. Every BERT-bodied family holds one as ``body`` (the bert family here,
  corpusforge.models.bert_classifier, corpusforge.models.sbert): their checkpoints share its parameter names
  (``body.wte``, ``body.blocks.0...``), so one loads into another by name.
- :class:`Bert`, pre-training: ``lm_head`` (tied to the token embedding) reads every state, the masked-LM logits;
  ``pooler`` (dense + tanh) reads the ``[CLS]`` state and ``nsp_head`` turns it into IsNext/NotNext logits.

Its input is ``[CLS] A [SEP] B [SEP]``: segment 0 for ``[CLS] A [SEP]``, 1 for ``B [SEP]``; the objective that
builds it and masks it is corpusforge.models.objectives.BertPretraining. ``forward(ids)`` gives the masked-LM
logits of one segment, so the lm stage's inspection (attention maps, what fills a ``[MASK]``) works unchanged.
Checkpoints written before the body was a module of its own (flat names, ``wte.weight``) load through
:func:`upgrade_weights`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn as nn

from corpusforge.models.gpt.model import add_stack, init_weights, run_blocks, scale_residual_projections

BODY = "body."
_FLAT = ("wte.", "wpe.", "wtt.", "blocks.", "ln_f.")  # the body's names before it was a module (family version 1)


def upgrade_weights(tensors: Mapping[str, Any]) -> dict[str, Any]:
    """Weights of a BERT-bodied checkpoint under today's names: a flat body (``wte.weight``, ``blocks.0...``,
    written before the body was a module) moves under ``body.``; today's names pass through."""
    if any(k.startswith(BODY) for k in tensors):
        return dict(tensors)
    return {(BODY + k if k.startswith(_FLAT) else k): v for k, v in tensors.items()}


class BertBody(nn.Module):
    """The encoder: embeddings (token, position, segment), the blocks without a causal mask, the final norm."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        add_stack(self, cfg, causal=False, segments=cfg.type_vocab_size)  # wte, wpe, wtt (segments), blocks, ln_f
        self.apply(init_weights)
        scale_residual_projections(self, cfg.n_layer)

    def forward(self, idx: torch.Tensor, segments: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                return_attention: bool = False) -> tuple[torch.Tensor, list]:
        """(states (B, T, C) after the final norm, attention maps or Nones). ``segments`` (B, T): 0 or 1 (None: all
        0); ``key_mask`` (B, T): True on real tokens (None: no padding)."""
        if segments is None:
            segments = torch.zeros_like(idx)
        x, maps = run_blocks(self, idx, return_attention, key_mask, added=self.wtt(segments))
        return self.ln_f(x), maps

    def num_params(self) -> int:
        """Parameters without the position table (as GPT counts them for FLOPs)."""
        n = sum(p.numel() for p in self.parameters())
        return n - (self.wpe.weight.numel() if self.cfg.positional == "learned" else 0)

    def flops_per_token(self, T: int | None = None, heads: int = 0) -> float:
        """Training FLOPs per token: 6N (the body's and ``heads`` more parameters) plus 12*L*C*T for attention."""
        c = self.cfg
        return 6 * (self.num_params() + heads) + 12 * c.n_layer * c.n_embd * (T or c.block_size)


class Bert(nn.Module):
    def __init__(self, cfg):
        if getattr(cfg, "mask_id", None) is None:
            raise ValueError("mask_id: BERT pre-training needs the tokenizer's mask token (tokenizer.roles.mask)")
        super().__init__()
        self.cfg = cfg
        self.body = BertBody(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.lm_head.weight = self.body.wte.weight
        else:
            init_weights(self.lm_head)
        if cfg.nsp:
            self.pooler = nn.Linear(cfg.n_embd, cfg.n_embd)
            self.nsp_head = nn.Linear(cfg.n_embd, 2)
            for layer in (self.pooler, self.nsp_head):
                init_weights(layer)

    upgrade_weights = staticmethod(upgrade_weights)

    @property
    def mask_id(self) -> int:
        return self.cfg.mask_id

    def encode(self, idx: torch.Tensor, segments: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
               return_attention: bool = False) -> tuple[torch.Tensor, list]:
        """The body's (states (B, T, C), attention maps or Nones)."""
        return self.body(idx, segments, key_mask, return_attention)

    def forward(self, idx: torch.Tensor, state=None, return_attention: bool = False,
                segments: torch.Tensor | None = None, key_mask: torch.Tensor | None = None):
        """idx (B, T) -> (masked-LM logits (B, T, V), None or the attention maps), as an encoder lm answers."""
        states, maps = self.body(idx, segments, key_mask, return_attention)
        logits = self.lm_head(states)
        return (logits, maps) if return_attention else (logits, None)

    def hidden_states(self, idx: torch.Tensor, segments: torch.Tensor | None = None,
                      key_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.body(idx, segments, key_mask)[0]

    def pretrain(self, idx: torch.Tensor, segments: torch.Tensor, key_mask: torch.Tensor):
        """(masked-LM logits (B, T, V), next-sentence logits (B, 2) or None without NSP)."""
        states, _ = self.body(idx, segments, key_mask)
        nsp = self.nsp_head(torch.tanh(self.pooler(states[:, 0]))) if self.cfg.nsp else None
        return self.lm_head(states), nsp

    def num_params(self, non_embedding: bool = True) -> int:
        return self.body.num_params() if non_embedding else sum(p.numel() for p in self.parameters())

    def flops_per_token(self, T: int | None = None) -> float:
        heads = sum(p.numel() for n, p in self.named_parameters() if n.startswith(("pooler.", "nsp_head.")))
        return self.body.flops_per_token(T, heads=heads)
