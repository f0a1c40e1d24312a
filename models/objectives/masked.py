"""Masked language modelling (Devlin et al. 2019): :class:`MaskedLM` on random windows of the token stream, and
:class:`BertPretraining` (masked LM plus next-sentence prediction over ``[CLS] A [SEP] B [SEP]`` pairs made of the
stream's documents). Both corrupt the chosen positions with BERT's 80/10/10 (:func:`~.base.mask_tokens`)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.contracts import hook
from corpusforge.models.objectives.base import IGNORE, Batch, Objective, evaluating, mask_tokens
from corpusforge.models.objectives.lm import TokenStream, as_tokens, random_windows


class MaskedLM(TokenStream):
    """Random windows with ~``mask_prob`` of the positions chosen: 80% of those become ``mask_id``, 10% a random
    token, 10% stay; the loss is the cross-entropy of the original tokens at the chosen positions. Evaluation
    masks with the same draws every time (a generator seeded 0), so its figure is comparable across runs."""

    def __init__(self, splits: Mapping[str, Any], block: int, vocab_size: int, mask_id: int, mask_prob: float = 0.15):
        super().__init__(splits, block)
        if mask_id is None or not 0 <= mask_id < vocab_size:
            raise ValueError(f"mask_id: a masked LM needs the tokenizer's mask token id, got {mask_id}")
        self.vocab_size, self.mask_id, self.mask_prob = vocab_size, mask_id, mask_prob

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        self.batch_size = batch_size

    def mask(self, x: torch.Tensor, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) for the masked-LM loss from windows ``x`` (B, T); targets are ``IGNORE`` where no
        prediction is asked. Every row gets at least one chosen position."""
        B, T = x.shape
        chosen = torch.rand(B, T, generator=gen) < self.mask_prob
        forced = torch.randint(T, (B,), generator=gen)
        chosen[torch.arange(B), forced] |= ~chosen.any(dim=1)  # a row with nothing chosen gets one position
        return mask_tokens(x, chosen, self.mask_id, self.vocab_size, gen)

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        x, _ = random_windows(self.splits["train"], self.block, self.batch_size, gen)
        x, y = self.mask(x, gen)
        return Batch((x, y), x.numel(), terms=int((y != IGNORE).sum()))

    def _score(self, model, data, batch_size, max_batches, device, autocast) -> dict[str, float]:
        gen = torch.Generator().manual_seed(0)
        return self._windows_score(model, data, batch_size, max_batches, device, autocast,
                                   prepare=lambda x, _y: self.mask(x, gen))


# --- BERT pre-training: sentence pairs ---------------------------------------------------------------------

class BertPretrainingLoss(nn.Module):
    """BERT and its pre-training loss as one module: ``(ids, segments, key_mask, targets, is_next, state) ->
    (masked-LM cross-entropy + next-sentence cross-entropy, None)``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids, segments, key_mask, targets, is_next, state: Any = None):
        mlm, nsp = self.model.pretrain(ids, segments, key_mask)
        loss = F.cross_entropy(mlm.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
        if nsp is not None:
            loss = loss + F.cross_entropy(nsp.float(), is_next)
        return loss, None


def sentences_of(data: np.ndarray, eot_id: int) -> list[np.ndarray]:
    """The documents of an encoded stream (each followed by ``eot_id``), without the separators; empty ones dropped."""
    cuts = np.flatnonzero(np.asarray(data) == eot_id)
    starts = np.concatenate(([0], cuts + 1))
    ends = np.concatenate((cuts, [len(data)]))
    return [np.asarray(data[a:b]) for a, b in zip(starts, ends) if b > a]


class BertPretraining(Objective):
    """Masked LM plus next-sentence prediction over sentence pairs (Devlin et al. 2019, section 3.1 and appendix
    A.1). The documents of the token stream (one per line of a line-mode corpus, separated by ``eot_id``) are the
    sentences. Each example is ``[CLS] A [SEP] B [SEP]`` with segment ids 0 for ``[CLS] A [SEP]`` and 1 for
    ``B [SEP]``: A is a random sentence, B the one after it (IsNext, label 1) for half the examples, a random one
    (NotNext, label 0) for the other half; the longer of the two loses tokens from its end until the pair fits
    ``block`` positions. Of the real tokens other than [CLS]/[SEP], ~``mask_prob`` are chosen (at least one per
    example): 80% become [MASK], 10% a random token, 10% stay. Batches are padded to their longest pair with
    [PAD] (never attended to, never scored). Without ``nsp``, each example is ``[CLS] A [SEP]`` and the loss is the
    masked LM's alone. The loss is their sum; evaluation draws the same examples every time (a generator seeded 0)
    and reports ``loss`` (the sum), ``mlm_loss``, ``ppl`` (exp of the masked-LM loss) and ``nsp_accuracy``."""

    loss_unit = "nats (masked-token mean + next-sentence mean)"

    def __init__(self, splits: Mapping[str, Any], block: int, vocab_size: int, mask_id: int, cls_id: int,
                 sep_id: int, pad_id: int, eot_id: int, mask_prob: float = 0.15, nsp: bool = True,
                 eval_examples: int = 4096):
        ids = {"mask_id": mask_id, "cls_id": cls_id, "sep_id": sep_id, "pad_id": pad_id, "eot_id": eot_id}
        missing = [k for k, v in ids.items() if v is None]
        if missing:
            raise ValueError(f"{', '.join(missing)}: BERT pre-training needs the tokenizer's mask, cls, sep, pad "
                             "roles and its eot_token (documents end with it)")
        self.sentences = {}
        for name, data in splits.items():
            if data is None:
                continue
            found = sentences_of(as_tokens(data), eot_id)
            if len(found) >= 2:
                self.sentences[name] = found
        if "train" not in self.sentences:
            raise ValueError("the train split has fewer than 2 documents: BERT's pairs need sentences (one per line)")
        self.block, self.vocab_size, self.mask_prob, self.nsp = block, vocab_size, mask_prob, nsp
        self.mask_id, self.cls_id, self.sep_id, self.pad_id = mask_id, cls_id, sep_id, pad_id
        self.eval_examples = eval_examples

    def has_split(self, split: str) -> bool:
        return split in self.sentences

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        self.batch_size = batch_size

    def loss_module(self, model: nn.Module) -> nn.Module:
        return BertPretrainingLoss(model)

    def flops_per_token(self, model: nn.Module) -> float:
        flops = hook(model, "flops_per_token")
        return flops(self.block) if flops else 0.0

    def pair(self, sentences: list[np.ndarray], gen: torch.Generator) -> tuple[list[int], list[int], int]:
        """One example: (ids, segment ids, is_next 1/0). Without NSP: [CLS] A [SEP], is_next 0."""
        n = len(sentences)
        i = int(torch.randint(n - 1, (1,), generator=gen))
        a = [int(t) for t in sentences[i]]
        if not self.nsp:
            a = a[: self.block - 2]
            return [self.cls_id, *a, self.sep_id], [0] * (len(a) + 2), 0
        is_next = int(torch.rand(1, generator=gen) < 0.5)
        j = i + 1 if is_next else int(torch.randint(n, (1,), generator=gen))
        b = [int(t) for t in sentences[j]]
        while len(a) + len(b) > self.block - 3:  # BERT's truncate_seq_pair: the longer one loses a token
            (a if len(a) >= len(b) else b).pop()
        ids = [self.cls_id, *a, self.sep_id, *b, self.sep_id]
        return ids, [0] * (len(a) + 2) + [1] * (len(b) + 1), is_next

    def collate(self, examples: list[tuple[list[int], list[int], int]], gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        """(ids, segments, key_mask, targets, is_next): padded to the longest example, then masked."""
        T = max(len(e[0]) for e in examples)
        B = len(examples)
        x = torch.full((B, T), self.pad_id, dtype=torch.long)
        seg = torch.zeros(B, T, dtype=torch.long)
        real = torch.zeros(B, T, dtype=torch.bool)
        for r, (ids, segs, _) in enumerate(examples):
            x[r, : len(ids)] = torch.tensor(ids)
            seg[r, : len(segs)] = torch.tensor(segs)
            real[r, : len(ids)] = True
        is_next = torch.tensor([e[2] for e in examples], dtype=torch.long)
        maskable = real & (x != self.cls_id) & (x != self.sep_id)
        chosen = (torch.rand(B, T, generator=gen) < self.mask_prob) & maskable
        weights = maskable.float() + 1e-9  # a row with nothing chosen gets one maskable position
        forced = torch.multinomial(weights, 1, generator=gen).squeeze(1)
        chosen[torch.arange(B), forced] |= ~chosen.any(dim=1) & maskable[torch.arange(B), forced]
        inputs, targets = mask_tokens(x, chosen, self.mask_id, self.vocab_size, gen)
        return inputs, seg, real, targets, is_next

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        train = self.sentences["train"]
        tensors = self.collate([self.pair(train, gen) for _ in range(self.batch_size)], gen)
        return Batch(tensors, int(tensors[2].sum()))

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        """The same ``eval_examples`` pairs every time (``max_batches * batch_size`` when smaller)."""
        sentences = self.sentences[split]
        n = self.eval_examples if not max_batches else min(self.eval_examples, max_batches * batch_size)
        gen = torch.Generator().manual_seed(0)
        mlm_total, mlm_count, nsp_total, nsp_right = 0.0, 0, 0.0, 0
        with evaluating(model):
            with torch.no_grad():
                for start in range(0, n, batch_size):
                    examples = [self.pair(sentences, gen) for _ in range(min(batch_size, n - start))]
                    ids, seg, real, targets, is_next = (t.to(device) for t in self.collate(examples, gen))
                    with autocast():
                        mlm, nsp = model.pretrain(ids, seg, real)
                    mlm_total += F.cross_entropy(mlm.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE,
                                                 reduction="sum").item()
                    mlm_count += int((targets != IGNORE).sum())
                    if nsp is not None:
                        nsp_total += F.cross_entropy(nsp.float(), is_next, reduction="sum").item()
                        nsp_right += int((nsp.argmax(-1) == is_next).sum())
        mlm_loss = mlm_total / mlm_count
        out = {"loss": mlm_loss + (nsp_total / n if self.nsp else 0.0), "mlm_loss": mlm_loss,
               "ppl": math.exp(min(mlm_loss, 700.0))}
        if self.nsp:
            out["nsp_accuracy"] = nsp_right / n
        return out


def masked_lm(model_cfg: Any, splits: Mapping[str, Any], settings: Any = None) -> MaskedLM:
    """Windows of ``model_cfg.block_size`` with ``settings.mask_prob`` of the positions chosen."""
    from corpusforge.models.objectives import MaskedSettings

    settings = settings or MaskedSettings(kind="masked_lm")
    return MaskedLM(splits, model_cfg.block_size, model_cfg.vocab_size, model_cfg.mask_id, settings.mask_prob)


def bert_pretraining(model_cfg: Any, splits: Mapping[str, Any], settings: Any = None) -> BertPretraining:
    """BERT's pairs (next-sentence prediction when the model has its head: ``model_cfg.nsp``)."""
    from corpusforge.models.objectives import MaskedSettings

    settings = settings or MaskedSettings(kind="bert_pretraining")
    return BertPretraining(splits, model_cfg.block_size, model_cfg.vocab_size, model_cfg.mask_id, model_cfg.cls_id,
                           model_cfg.sep_id, model_cfg.pad_id, model_cfg.eot_id, settings.mask_prob, model_cfg.nsp)
