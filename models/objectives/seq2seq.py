"""Source-target pairs for encoder-decoders: :class:`Seq2Seq` (teacher forcing, label smoothing, padding ignored),
and :class:`Denoising` (BART's pre-training: the pairs are made from plain text by corrupting it)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpusforge.models.contracts import hook
from corpusforge.models.objectives.base import IGNORE, Batch, Objective, evaluating


class Seq2SeqLoss(nn.Module):
    """An encoder-decoder and its label-smoothed cross-entropy as one module:
    ``(src, src_mask, tgt_in, tgt_mask, target, state) -> (loss, None)``; the model maps
    ``(src, src_mask, tgt_in, tgt_mask)`` to logits ``(B, T_tgt, V)`` (the ``translate`` capability). Targets of
    ``IGNORE`` (padding) carry no loss, and the mean is over the real target tokens."""

    def __init__(self, model: nn.Module, label_smoothing: float = 0.0):
        super().__init__()
        self.model, self.label_smoothing = model, label_smoothing

    def forward(self, src, src_mask, tgt_in, tgt_mask, target, state: Any = None):
        logits = self.model(src, src_mask, tgt_in, tgt_mask)
        return F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), ignore_index=IGNORE,
                               label_smoothing=self.label_smoothing), None


class Seq2Seq(Objective):
    """Source-target pairs: each split is ``(sources, targets)``, lists of token-id lists without bos/eos. A pair
    becomes ``src``, ``tgt_in = [bos] + target`` (what the decoder reads, teacher forcing) and
    ``target + [eos]`` (what it predicts), each cut to ``max_len`` (the source to ``max_source_len`` and the two target
rows to ``max_target_len`` when given, each at most ``max_len``: a summarizer reads longer documents than it
writes); batches are length-bucketed and padded
    (corpusforge.models.batching), reshuffled every epoch and found again by number (exact resume). The loss is the
    cross-entropy over the real target tokens, label-smoothed (Szegedy et al. 2016; the Transformer's 0.1); the
    trainer counts the real target tokens. Evaluation: the plain (unsmoothed) cross-entropy per target token and
    its perplexity over the split."""

    def __init__(self, splits: Mapping[str, tuple[Any, Any]], pad_id: int, bos_id: int, eos_id: int,
                 label_smoothing: float = 0.0, max_len: int | None = None, seed: int = 0,
                 max_source_len: int | None = None, max_target_len: int | None = None):
        if None in (pad_id, bos_id, eos_id):
            raise ValueError(f"pad_id, bos_id, eos_id: an encoder-decoder needs the tokenizer's pad, bos and eos "
                             f"roles, got {pad_id}, {bos_id}, {eos_id}")
        for name, value in (("max_len", max_len), ("max_source_len", max_source_len),
                            ("max_target_len", max_target_len)):
            if value is not None and value < 2:
                raise ValueError(f"{name}: must be >= 2 (bos or eos and one token), got {value}")
        self.splits = {}
        for name, pair in splits.items():
            if pair is None or not len(pair[0]):
                continue
            sources, targets = list(pair[0]), list(pair[1])
            if len(sources) != len(targets):
                raise ValueError(f"split {name}: {len(sources)} sources but {len(targets)} targets")
            self.splits[name] = (sources, targets)
        if "train" not in self.splits:
            raise ValueError("the train split is empty: nothing to train on")
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.label_smoothing, self.max_len, self.seed = label_smoothing, max_len, seed
        self.source_cut, self.target_cut = _tighter(max_source_len, max_len), _tighter(max_target_len, max_len)

    def has_split(self, split: str) -> bool:
        return split in self.splits

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches

        sources, targets = self.splits["train"]
        lengths = [len(s) + len(t) for s, t in zip(sources, targets)]  # buckets of similar total length
        self.batches = EpochBatches(lengths, batch_size, self.seed, rank, world)

    def collate(self, sources: Any, targets: Any) -> tuple[torch.Tensor, ...]:
        """``(src, src_mask, tgt_in, tgt_mask, target)``; ``target`` is ``IGNORE`` past each row's end. A target
        cut by ``max_len`` (``max_target_len``) loses its eos (it did not end there)."""
        from corpusforge.models.batching import pad

        src, src_mask = pad([list(s) for s in sources], self.pad_id, self.source_cut)
        tgt_in, tgt_mask = pad([[self.bos_id, *t] for t in targets], self.pad_id, self.target_cut)
        target, _ = pad([[*t, self.eos_id] for t in targets], IGNORE, self.target_cut)
        return src, src_mask, tgt_in, tgt_mask, target

    def _pairs(self, split: str, indices: list[int]) -> tuple[torch.Tensor, ...]:
        sources, targets = self.splits[split]
        return self.collate([sources[i] for i in indices], [targets[i] for i in indices])

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        indices, _ = self.batches.get(index)
        tensors = self._pairs("train", indices)
        return Batch(tensors, int(tensors[3].sum()), terms=int((tensors[4] != IGNORE).sum()))

    def loss_module(self, model: nn.Module) -> nn.Module:
        return Seq2SeqLoss(model, self.label_smoothing)

    def flops_per_token(self, model: nn.Module) -> float:
        flops = hook(model, "flops_per_token")
        return flops() if flops else 0.0

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        """The first ``max_batches * batch_size`` pairs (all with 0), batched by length (little padding; the sum
        does not depend on the order)."""
        sources, targets = self.splits[split]
        n = len(sources) if not max_batches else min(len(sources), max_batches * batch_size)
        order = sorted(range(n), key=lambda i: (len(sources[i]) + len(targets[i]), i))
        return self._scored(model, (self._pairs(split, order[start: start + batch_size])
                                    for start in range(0, n, batch_size)), device, autocast)

    @staticmethod
    def _scored(model, batches, device, autocast) -> dict[str, float]:
        """The plain cross-entropy per target token (and its perplexity) over collated ``batches``."""
        total, count = 0.0, 0
        with evaluating(model):
            with torch.no_grad():
                for tensors in batches:
                    src, src_mask, tgt_in, tgt_mask, target = (t.to(device) for t in tensors)
                    with autocast():
                        logits = model(src, src_mask, tgt_in, tgt_mask)
                    total += F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), ignore_index=IGNORE,
                                             reduction="sum").item()
                    count += int(tgt_mask.sum())
        loss = total / count
        return {"loss": loss, "ppl": math.exp(min(loss, 700.0))}


def _tighter(a: int | None, b: int | None) -> int | None:
    """The smaller of two optional caps (None: no cap)."""
    return b if a is None else a if b is None else min(a, b)


def seq2seq(model_cfg: Any, splits: Mapping[str, Any], settings: Any = None, max_source_len: int | None = None,
            max_target_len: int | None = None) -> Seq2Seq:
    """Source-target pairs (``{split: (sources, targets)}``) with the model's pad/bos/eos ids and ``max_len``, and
    the objective's ``label_smoothing``; ``max_source_len``/``max_target_len``: the stage's own cuts (the seq2seq
    stage's fields of those names)."""
    from corpusforge.models.objectives import Seq2SeqSettings

    settings = settings or Seq2SeqSettings(kind="seq2seq")
    return Seq2Seq(splits, pad_id=model_cfg.pad_id, bos_id=model_cfg.bos_id, eos_id=model_cfg.eos_id,
                   label_smoothing=settings.label_smoothing, max_len=getattr(model_cfg, "max_len", None),
                   max_source_len=max_source_len, max_target_len=max_target_len)


def truncate(doc: list[list[int]], cut: int | None) -> list[list[int]]:
    """A text's first ``cut`` tokens, its sentences kept in order (the last one cut short); None: the whole text."""
    if cut is None:
        return doc
    out, room = [], cut
    for sentence in doc:
        if room <= 0:
            break
        out.append(sentence[:room])
        room -= len(out[-1])
    return out


def corrupt(doc: list[list[int]], gen: torch.Generator, mask_id: int, mask_ratio: float = 0.3,
            poisson_lambda: float = 3.0, permute_sentences: bool = True, cut: int | None = None) -> list[int]:
    """BART's noise on one text (a list of sentences' token ids): the text cut to its first ``cut`` tokens
    (:func:`truncate`: what the model reads and rebuilds), its sentences shuffled, then ``mask_ratio`` of the tokens
    hidden in spans of Poisson(``poisson_lambda``) lengths, each span one ``mask_id`` (a 0-length span inserts one);
    masks at least one token apart. Randomness from ``gen`` only."""
    doc = truncate(doc, cut)
    order = (torch.randperm(len(doc), generator=gen).tolist() if permute_sentences and len(doc) > 1
             else range(len(doc)))
    tokens = [t for i in order for t in doc[i]]
    n = len(tokens)
    budget = round(mask_ratio * n)
    hidden, span_starts, inserts = [False] * n, set(), set()
    rate = torch.tensor([poisson_lambda])
    for _ in range(8 * n + 8):  # enough tries to place the spans of any text; never an endless loop
        if budget <= 0:
            break
        length = min(int(torch.poisson(rate, generator=gen).item()), budget)
        start = int(torch.randint(n - length + 1, (1,), generator=gen).item())
        if any(hidden[max(start - 1, 0): start + length + 1]) or inserts.intersection(range(start, start + length + 1)):
            continue  # masks at least one token apart: two side by side would read as one
        if length == 0:  # BART's 0-length span: a mask inserted, nothing hidden
            inserts.add(start)
            continue
        hidden[start: start + length] = [True] * length
        span_starts.add(start)
        budget -= length
    out = []
    for i, token in enumerate(tokens):
        if i in inserts or i in span_starts:
            out.append(mask_id)
        if not hidden[i]:
            out.append(token)
    if n in inserts:
        out.append(mask_id)
    return out


class Denoising(Seq2Seq):
    """BART's denoising pre-training (Lewis et al. 2020, section 2.2): each split is a list of texts, each text a
    list of sentences (token-id lists). A pair is (the corrupted text, the text): its sentences shuffled
    (``permute_sentences``), then spans of tokens, ``mask_ratio`` of them in all, each replaced by one ``mask_id``,
    span lengths drawn from Poisson(``poisson_lambda``) (a 0-length span inserts a mask); the target is the text as
    it was, so the decoder learns to write whole texts from damaged ones. The corruption is drawn afresh for every
    batch from the trainer's generator (a resumed run draws the same), and for evaluation from a generator seeded
    by the split, so the val loss of every evaluation reads the same corrupted texts."""

    def __init__(self, splits: Mapping[str, Any], pad_id: int, bos_id: int, eos_id: int, mask_id: int,
                 mask_ratio: float = 0.3, poisson_lambda: float = 3.0, permute_sentences: bool = True,
                 label_smoothing: float = 0.0, max_len: int | None = None, seed: int = 0,
                 max_source_len: int | None = None, max_target_len: int | None = None):
        if mask_id is None:
            raise ValueError("mask_id: denoising needs the tokenizer's mask role (<mask>)")
        texts = {name: (list(docs), list(docs)) for name, docs in splits.items() if docs}
        super().__init__(texts, pad_id, bos_id, eos_id, label_smoothing, max_len, seed, max_source_len,
                         max_target_len)
        self.mask_id, self.mask_ratio, self.poisson_lambda = mask_id, mask_ratio, poisson_lambda
        self.permute_sentences = permute_sentences
        self.lengths = {name: [sum(len(s) for s in truncate(doc, self.source_cut)) for doc in docs]
                        for name, (docs, _) in self.splits.items()}

    def setup(self, model, batch_size, rank=0, world=1) -> None:
        from corpusforge.models.batching import EpochBatches

        self.batches = EpochBatches(self.lengths["train"], batch_size, self.seed, rank, world)

    def tokens_served(self, micro_batches: int) -> int:
        """The tokens of the texts in the first ``micro_batches`` training micro-batches (what the model read)."""
        lengths = self.lengths["train"]
        return sum(lengths[i] for index in range(micro_batches) for i in self.batches.get(index)[0])

    def corrupt(self, doc: list[list[int]], gen: torch.Generator) -> list[int]:
        """One text's corrupted copy (:func:`corrupt`), cut to the source length first."""
        return corrupt(doc, gen, self.mask_id, self.mask_ratio, self.poisson_lambda, self.permute_sentences,
                       self.source_cut)

    def _noised(self, split: str, indices: list[int], gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        docs = self.splits[split][0]
        sources = [self.corrupt(docs[i], gen) for i in indices]
        targets = [[t for sentence in truncate(docs[i], self.source_cut) for t in sentence] for i in indices]
        return self.collate(sources, targets)

    def batch(self, index: int, gen: torch.Generator) -> Batch:
        indices, _ = self.batches.get(index)
        tensors = self._noised("train", indices, gen)
        return Batch(tensors, int(tensors[3].sum()), terms=int((tensors[4] != IGNORE).sum()))

    def evaluate(self, model, split, batch_size, max_batches=0, device="cpu", autocast=contextlib.nullcontext):
        """The plain cross-entropy per target token of rebuilding the split's first texts from corruptions drawn by
        a generator seeded with the objective's seed (the same texts, the same damage, at every evaluation)."""
        docs = self.splits[split][0]
        n = len(docs) if not max_batches else min(len(docs), max_batches * batch_size)
        gen = torch.Generator().manual_seed(self.seed + 7919)
        return self._scored(model, (self._noised(split, list(range(start, min(n, start + batch_size))), gen)
                                    for start in range(0, n, batch_size)), device, autocast)


def denoising(model_cfg: Any, splits: Mapping[str, Any], settings: Any = None, mask_id: int | None = None,
              max_source_len: int | None = None, max_target_len: int | None = None) -> Denoising:
    """Texts (``{split: [text, ...]}``, a text a list of sentences' token ids) corrupted BART's way, with the model's
    pad/bos/eos ids, ``mask_id`` (the tokenizer's mask role) and the objective's settings."""
    from corpusforge.models.objectives import DenoisingSettings

    settings = settings or DenoisingSettings()
    return Denoising(splits, pad_id=model_cfg.pad_id, bos_id=model_cfg.bos_id, eos_id=model_cfg.eos_id,
                     mask_id=mask_id, mask_ratio=settings.mask_ratio, poisson_lambda=settings.poisson_lambda,
                     permute_sentences=settings.permute_sentences, label_smoothing=settings.label_smoothing,
                     max_len=getattr(model_cfg, "max_len", None), max_source_len=max_source_len,
                     max_target_len=max_target_len)
