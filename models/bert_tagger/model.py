"""BERT token classification in one readable file (Devlin et al. 2019, figure 4d, NER): a sentence's words, each
split into its sub-words by the checkpoint's own tokenizer, read as ``[CLS] w1_1 w1_2 w2_1 ... [SEP]`` by the bert
family's body (corpusforge.models.bert.model.BertBody, held as ``body``); the state of **each word's first
sub-word** -> dropout -> a linear layer: a score per tag at each word (the emissions). The other sub-words carry no
label, as in the paper; a word's tag is decided at its first piece, so predictions map back to words one to one.

A sentence, as the tagging objective hands it over, is a list of words, each its sub-word ids. ``collate`` pads a
batch to ``(ids, token mask, first (B, W): each word's first sub-word position, word mask)``; ``forward`` gives
(B, W, n_tags); ``tag_loss`` is each word's cross-entropy, summed, with the number of words; ``decode`` the argmax.
Words past ``max_len``, or whose sub-words no longer fit in ``block_size`` with [CLS] and [SEP], are not read (the
caller tags the rest of the sentence in a second piece: corpusforge.tasks.tag.inference).

Its parameter names are the bert family's (``body.*``), so a pre-trained BERT checkpoint loads into it by name; the
masked-LM and NSP heads are not kept and ``classifier`` starts fresh.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.bert.model import BertBody, upgrade_weights
from corpusforge.models.bert_tagger.config import BertTaggerConfig
from corpusforge.models.gpt.model import init_weights
from corpusforge.models.objectives.base import IGNORE


class BertTagger(nn.Module):
    HEAD = ("classifier.",)

    def __init__(self, cfg: BertTaggerConfig):
        if None in (cfg.cls_id, cfg.sep_id, cfg.pad_id):
            raise ValueError("cls_id, sep_id, pad_id: a BERT tagger reads [CLS] words [SEP] padded with [PAD]; "
                             "start it from a bert checkpoint (tag.init) whose tokenizer has them")
        super().__init__()
        self.cfg = cfg
        self.body = BertBody(cfg)
        self.drop = nn.Dropout(cfg.classifier_dropout)
        self.classifier = nn.Linear(cfg.n_embd, cfg.n_tags)
        init_weights(self.classifier)

    upgrade_weights = staticmethod(upgrade_weights)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.body.wte

    def collate(self, sentences: Sequence[Sequence[Sequence[int]]]) -> tuple[torch.Tensor, ...]:
        """Sentences (each word's sub-word ids) -> (ids (B, T), token mask (B, T), first (B, W), word mask (B, W)):
        the words that fit (max_len words, their sub-words within block_size with [CLS] and [SEP]; the first word
        always, cut to the block if it must be); an empty sentence reads one position (its [CLS])."""
        cfg = self.cfg
        rows, firsts = [], []
        for words in sentences:
            ids, first = [cfg.cls_id], []
            for pieces in list(words)[: cfg.max_len]:
                pieces = list(pieces) or [cfg.pad_id]
                if len(ids) + len(pieces) > cfg.block_size - 1:
                    if first:
                        break
                    pieces = pieces[: cfg.block_size - 2]  # one word longer than the block: its first pieces
                first.append(len(ids))
                ids.extend(pieces)
            rows.append(ids + [cfg.sep_id])
            firsts.append(first)
        T = max(len(r) for r in rows)
        W = max(1, max(len(f) for f in firsts))
        ids = torch.full((len(rows), T), cfg.pad_id, dtype=torch.long)
        token_mask = torch.zeros((len(rows), T), dtype=torch.bool)
        first = torch.zeros((len(rows), W), dtype=torch.long)
        word_mask = torch.zeros((len(rows), W), dtype=torch.bool)
        for b, (row, f) in enumerate(zip(rows, firsts)):
            ids[b, : len(row)] = torch.as_tensor(row)
            token_mask[b, : len(row)] = True
            if f:
                first[b, : len(f)] = torch.as_tensor(f)
            word_mask[b, : max(1, len(f))] = True
        return ids, token_mask, first, word_mask

    def forward(self, ids: torch.Tensor, token_mask: torch.Tensor, first: torch.Tensor,
                word_mask: torch.Tensor) -> torch.Tensor:
        """-> emissions (B, W, n_tags): the tag scores at each word's first sub-word."""
        states, _ = self.body(ids, None, token_mask)
        picked = states.gather(1, first.unsqueeze(-1).expand(-1, -1, states.shape[-1]))
        return self.classifier(self.drop(picked))

    def tag_loss(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(each word's cross-entropy summed over the batch, the number of words with a tag)."""
        emissions = emissions.float()
        total = F.cross_entropy(emissions.reshape(-1, emissions.shape[-1]), tags.reshape(-1), ignore_index=IGNORE,
                                reduction="sum")
        return total, int((tags != IGNORE).sum())

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """The argmax tag of each word that was read."""
        best = emissions.argmax(-1).tolist()
        return [row[:n] for row, n in zip(best, mask.sum(1).tolist())]

    def flops_per_token(self, T: int | None = None) -> float:
        return self.body.flops_per_token(T, heads=sum(p.numel() for p in self.classifier.parameters()))
